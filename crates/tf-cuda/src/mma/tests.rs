//! kernels/mma.cu built for the host (host_cxx's SIMT emulation, the m16n8k16 product rebuilt
//! from the PTX ISA's fragment layouts): the device tiling against [`tile_host`], each
//! choice (tiles a block, x staged or not) against a float64 reference, and a row's bits alone,
//! among others and in each choice. The tensor cores' own summation is not modelled; the
//! contract suite checks that on the GPU.

use super::*;
use crate::host_cxx;
use crate::suite::packed::HostWeights;
use crate::weights::device_bytes;
use tf_kernels::contract::Rng;
use tf_kernels::matmul::FloatType;

/// The tiles of an MLX 4-bit matrix on the host, from its rows-layout device bytes (what
/// `tf_mma_tile_mlx4` makes).
fn tile_host(rows_bytes: &[u8], rows: usize, cols: usize) -> Vec<u8> {
    let (groups, tiles, units) = (cols / GROUP, rows.div_ceil(16), cols / 32);
    let word = |row: usize, u: usize, i: usize| {
        let at = (row * units + u) * 24 + 4 * i;
        u32::from_le_bytes(rows_bytes[at..at + 4].try_into().unwrap())
    };
    let code = |row: usize, c: usize| {
        if row >= rows {
            0
        } else {
            (word(row, c / 32, (c % 32) / 8) >> (4 * (c % 8))) & 15
        }
    };
    let mut out = vec![0u8; tile_bytes(rows, cols, false)];
    let sb_at = tiles * groups * 512;
    for tile in 0..tiles {
        for grp in 0..groups {
            let tg = tile * groups + grp;
            for lane in 0..32 {
                let (g, t) = (16 * tile + lane / 4, lane % 4);
                for m in 0..4 {
                    let k = GROUP * grp + 16 * m + 2 * t;
                    let regs = [(g, k), (g + 8, k), (g, k + 8), (g + 8, k + 8)];
                    let mut v = 0u32;
                    for (r, (row, c)) in regs.into_iter().enumerate() {
                        v |= code(row, c) << (4 * r) | code(row, c + 1) << (4 * (r + 4));
                    }
                    let at = (tg * 32 + lane) * 16 + 4 * m;
                    out[at..at + 4].copy_from_slice(&v.to_le_bytes());
                }
            }
            for r in 0..16 {
                let row = 16 * tile + r;
                if row < rows {
                    let at = sb_at + (tg * 16 + 2 * (r % 8) + r / 8) * 8;
                    let (sc, b) = (word(row, 2 * grp, 4), word(row, 2 * grp, 5));
                    let b = f32::from_bits(b) - 128.0 * f32::from_bits(sc);
                    out[at..at + 4].copy_from_slice(&sc.to_le_bytes());
                    out[at + 4..at + 8].copy_from_slice(&b.to_le_bytes());
                }
            }
        }
    }
    out
}

/// The host harness: reads (rows, cols, n, rows-layout bytes, x), writes the tiles, then y of
/// each choice (tiles a block, x staged or not) and of the planted control in turn, then of the
/// split products; then the same of the compact tiles (the `_b16` entries), a planted control
/// of theirs, and the scales' check of the matrix and of a planted non-bf16 bias.
fn harness() -> String {
    let mut calls = String::new();
    // A choice's product of x, of `tiles` through `name`.
    let choice = |name: &str, c: Choice, tiles: &str| {
        // The staged choice: 4 x rows a block; the others 8.
        let (smem, xr) = if c.staged {
            ("(size_t)std::min(n, 4) * (cols / 64) * 256", 4)
        } else {
            ("0", 8)
        };
        format!(
            "    tf_launch(D3{{(unsigned)((rows + {t} - 1) / {t}), (unsigned)((n + {xr} - 1) / {xr}), 1}}, {threads}, {smem}, [&] {{ {name}({tiles}.data(), x.data(), y.data(), n, rows, cols); }});\n\
             \x20   fwrite(y.data(), 4, y.size(), fo);\n",
            t = 16 * c.rt,
            threads = 32 * WARPS,
        )
    };
    let plant = Choice {
        rt: 1,
        staged: false,
    };
    let kernels = Choice::ALL
        .iter()
        .map(|&c| (c.kernel(), c))
        .chain([(PLANT_ROW_VARIANT, plant)]);
    for (name, c) in kernels {
        calls.push_str(&choice(name, c, "tiles"));
    }
    // Then x split once (tf_mma_split) into the four split products (one and two tiles, 8 and 4
    // x rows a block), and the planted split into the one-tile product.
    let split = |kernel: &str| {
        format!(
            "    tf_launch(D3{{(unsigned)((cols / 64 + 3) / 4), (unsigned)((n + 7) / 8), 1}}, 128, 0, [&] {{ {kernel}(x.data(), parts.data(), sums.data(), n, cols); }});\n"
        )
    };
    let product_of = |rt: usize, xr: usize, suffix: &str, tiles: &str| {
        format!(
            "    tf_launch(D3{{(unsigned)((rows + {t} - 1) / {t}), (unsigned)((n + {xr} - 1) / {xr}), 1}}, {threads}, 0, [&] {{ {k}{suffix}({tiles}.data(), parts.data(), sums.data(), y.data(), n, rows, cols, 0, (rows + 15) / 16); }});\n\
             \x20   fwrite(y.data(), 4, y.size(), fo);\n",
            t = 16 * rt,
            k = if xr == 4 { SPLIT_KERNELS_X4 } else { SPLIT_KERNELS }[rt - 1],
            threads = 32 * WARPS,
        )
    };
    let product = |rt: usize, xr: usize| product_of(rt, xr, "", "tiles");
    // y of the split product as two spans of tiles, each launched on one block (which then
    // takes its span's tiles in turn): [0, rt), then [rt, end) (end: the last tile, or short
    // of it for the planted control), y emptied first.
    let spans = |rt: usize, xr: usize, end: &str| {
        format!(
            "    std::fill(y.begin(), y.end(), 0.0f);\n\
             \x20   for (int s = 0; s < 2; s++) tf_launch(D3{{1, (unsigned)((n + {xr} - 1) / {xr}), 1}}, {threads}, 0, [&] {{ {k}(tiles.data(), parts.data(), sums.data(), y.data(), n, rows, cols, s ? {rt} : 0, s ? {end} : {rt}); }});\n\
             \x20   fwrite(y.data(), 4, y.size(), fo);\n",
            k = if xr == 4 { SPLIT_KERNELS_X4 } else { SPLIT_KERNELS }[rt - 1],
            threads = 32 * WARPS,
        )
    };
    let whole = "(rows + 15) / 16";
    let compact = |rt: usize, xr: usize| product_of(rt, xr, "_b16", "tiles16");
    for part in [
        split("tf_mma_split"),
        product(1, 8),
        product(2, 8),
        product(1, 4),
        product(2, 4),
        spans(1, 8, whole),
        spans(2, 4, whole),
        spans(1, 4, "(rows + 15) / 16 - 1"),
        split(PLANT_SPLIT_SUMS),
        product(1, 8),
    ] {
        calls.push_str(&part);
    }
    calls.push_str(
        "    std::vector<u8> tiles16(nt * 576);\n\
         \x20   tf_launch(D3{(unsigned)((nt * 32 + 255) / 256), 1, 1}, 256, 0, [&] { tf_mma_tile_mlx4_b16(src.data(), tiles16.data(), rows, cols); });\n",
    );
    for c in Choice::ALL {
        calls.push_str(&choice(&format!("{}_b16", c.kernel()), c, "tiles16"));
    }
    for part in [
        split("tf_mma_split"),
        compact(1, 8),
        compact(2, 8),
        compact(1, 4),
        compact(2, 4),
    ] {
        calls.push_str(&part);
    }
    // Planted: each compact pair's halves swapped (b taken for s and s for b).
    calls.push_str(
        "    for (size_t i = nt * 512; i < tiles16.size(); i += 4) { u32 v; std::memcpy(&v, &tiles16[i], 4); v = v << 16 | v >> 16; std::memcpy(&tiles16[i], &v, 4); }\n",
    );
    calls.push_str(&compact(1, 8));
    // The scales' check, then again with row 0's first bias no longer a bf16.
    calls.push_str(
        "    u32 wide[2] = {0u, 0u};\n\
         \x20   const unsigned pairs = (unsigned)(rows * (cols / 64));\n\
         \x20   tf_launch(D3{(pairs + 255) / 256, 1, 1}, 256, 0, [&] { tf_mma_scales_wide(src.data(), rows, cols, &wide[0]); });\n\
         \x20   src[20] |= 1;\n\
         \x20   tf_launch(D3{(pairs + 255) / 256, 1, 1}, 256, 0, [&] { tf_mma_scales_wide(src.data(), rows, cols, &wide[1]); });\n\
         \x20   fwrite(wide, 4, 2, fo);\n",
    );
    format!(
        "{prelude}\n{source}\n\
         int main(int argc, char** argv) {{\n\
         \x20   FILE *fi, *fo;\n\
         \x20   if (!tf_open_io(argc, argv, &fi, &fo)) return 1;\n\
         \x20   int head[3];\n\
         \x20   if (fread(head, 4, 3, fi) != 3) return 1;\n\
         \x20   const int rows = head[0], cols = head[1], n = head[2];\n\
         \x20   const size_t nt = (size_t)(rows + 15) / 16 * (cols / 64);\n\
         \x20   std::vector<u8> src((size_t)rows * cols / 32 * 24), tiles(nt * 640);\n\
         \x20   std::vector<float> x((size_t)n * cols), y((size_t)n * rows), sums((size_t)n * cols / 64);\n\
         \x20   std::vector<uint4> parts((size_t)n * cols / 4);\n\
         \x20   if (fread(src.data(), 1, src.size(), fi) != src.size() || fread(x.data(), 4, x.size(), fi) != x.size()) return 1;\n\
         \x20   tf_launch(D3{{(unsigned)((nt * 32 + 255) / 256), 1, 1}}, 256, 0, [&] {{ tf_mma_tile_mlx4(src.data(), tiles.data(), rows, cols); }});\n\
         \x20   fwrite(tiles.data(), 1, tiles.size(), fo);\n\
         {calls}\
         \x20   fclose(fo);\n\
         \x20   return 0;\n\
         }}\n",
        prelude = host_cxx::SIMT_PRELUDE,
        source = include_str!("../../kernels/mma.cu"),
    )
}

/// One emulated run: the tiles, then y of each choice and of the plant, then of the split
/// products (one and two tiles a block), of two as spans of tiles and of a planted short span,
/// and of the planted split; then, of the compact tiles, y of each choice, of the four split
/// products and of the planted swap; the scales' check of the matrix and of the planted bias.
struct Run {
    tiles: Vec<u8>,
    ys: Vec<Vec<f32>>,
    compact: Vec<Vec<f32>>,
    wide: [u32; 2],
}

fn emulate(
    dir: &std::path::Path,
    exe: &std::path::Path,
    src: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    n: usize,
) -> Run {
    let mut input = Vec::new();
    for v in [rows, cols, n] {
        input.extend((v as i32).to_le_bytes());
    }
    input.extend_from_slice(src);
    input.extend(x.iter().flat_map(|v| v.to_le_bytes()));
    let out = host_cxx::run(dir, exe, &format!("{rows}x{cols}-{n}"), &input);
    let tb = tile_bytes(rows, cols, false);
    let (ys, wide) = out[tb..].split_at(out.len() - tb - 8);
    let ys: Vec<Vec<f32>> = host_cxx::floats(ys)
        .chunks(n * rows)
        .map(<[f32]>::to_vec)
        .collect();
    let wide = [0, 4].map(|at| u32::from_le_bytes(wide[at..at + 4].try_into().unwrap()));
    assert_eq!(ys.len(), 2 * Choice::ALL.len() + 14);
    let (ys, compact) = ys.split_at(Choice::ALL.len() + 9);
    Run {
        tiles: out[..tb].to_vec(),
        ys: ys.to_vec(),
        compact: compact.to_vec(),
        wide,
    }
}

/// The largest |y - reference| over the row's sum of |terms|.
fn max_rel_err(y: &[f32], wf: &[f64], cols: usize, x: &[f32], n: usize) -> f64 {
    let rows = wf.len() / cols;
    let mut worst = 0f64;
    for i in 0..n {
        for j in 0..rows {
            let (mut acc, mut abs) = (0f64, 0f64);
            for k in 0..cols {
                let p = wf[j * cols + k] * f64::from(x[i * cols + k]);
                acc += p;
                abs += p.abs();
            }
            let e = (f64::from(y[i * rows + j]) - acc).abs() / abs.max(f64::MIN_POSITIVE);
            worst = worst.max(e);
        }
    }
    worst
}

#[test]
fn tiles_and_products_match_the_reference_and_rows_keep_their_bits() {
    let Some(cxx) = host_cxx::compiler() else {
        return;
    };
    let (dir, exe) = host_cxx::build(&cxx, "mma", &harness());
    let mut rng = Rng::new(0x3a3a_0001);
    // 40 rows: a partial tile; 256 columns: 4 groups, fewer than the block's warps.
    for (rows, cols, group) in [(40, 256, 64), (32, 2048, 128)] {
        let hw = HostWeights::random_mlx(4, group, FloatType::BF16, rows, cols, &mut rng);
        let src = device_bytes(&hw.packed())
            .expect("rows layout")
            .into_owned();
        let wf: Vec<f64> = (0..rows).flat_map(|j| hw.row_f64(j)).collect();
        let n = 20; // three blocks of 8 x rows
        let x: Vec<f32> = (0..n * cols).map(|_| rng.uniform(-1.0, 1.0)).collect();
        let all = emulate(&dir, &exe, &src, rows, cols, &x, n);
        assert!(
            all.tiles == tile_host(&src, rows, cols),
            "{rows}x{cols}: the device tiling differs from tile_host"
        );
        let solo = emulate(&dir, &exe, &src, rows, cols, &x[13 * cols..14 * cols], 1);
        let base = &all.ys[0];
        for (c, y) in Choice::ALL.iter().zip(&all.ys) {
            let err = max_rel_err(y, &wf, cols, &x, n);
            // Two bf16 parts keep about 16 bits of each x (seen: 9.7e-7 and 2.4e-7, the 128 left in the sums).
            assert!(err <= 2e-6, "{rows}x{cols} {c:?}: error {err:.2e}");
            assert_eq!(host_cxx::differing(y, base), 0, "{c:?} differs from r1");
        }
        for y1 in &solo.ys[..Choice::ALL.len()] {
            assert_eq!(
                host_cxx::differing(&base[13 * rows..14 * rows], y1),
                0,
                "{rows}x{cols}: row 13 alone differs from its place among 20"
            );
        }
        // Planted control: the low parts dropped when a call has several rows.
        let planted = &all.ys[Choice::ALL.len()];
        let err = max_rel_err(planted, &wf, cols, &x, n);
        assert!(
            err > 2e-6,
            "the planted control's error {err:.2e} went unseen"
        );
        assert_eq!(
            host_cxx::differing(&solo.ys[Choice::ALL.len()], &base[13 * rows..14 * rows]),
            0,
            "the plant alone (one row) keeps the order's bits"
        );
        // x split once: the products' bits, in a call of 20 rows and alone.
        let at = Choice::ALL.len() + 1;
        for (run, rows_of) in [(&all, 0..n * rows), (&solo, 13 * rows..14 * rows)] {
            let kernels = SPLIT_KERNELS.iter().chain(&SPLIT_KERNELS_X4);
            for (k, y) in kernels.zip(&run.ys[at..at + 4]) {
                assert_eq!(host_cxx::differing(y, &base[rows_of.clone()]), 0, "{k}");
            }
            // As spans of tiles, each on one block: the same bits; a span short of the last
            // tile (planted) leaves its rows empty.
            for (k, y) in ["spans r1", "spans r2 x4"]
                .iter()
                .zip(&run.ys[at + 4..at + 6])
            {
                assert_eq!(host_cxx::differing(y, &base[rows_of.clone()]), 0, "{k}");
            }
            assert_ne!(
                host_cxx::differing(&run.ys[at + 6], &base[rows_of.clone()]),
                0
            );
            // Control: the planted split's sums (f32 from x) change the bits.
            assert_ne!(
                host_cxx::differing(&run.ys[at + 7], &base[rows_of.clone()]),
                0
            );
            // The compact tiles: every choice and split product the bits of the f32 pairs'.
            let compact = &run.compact;
            for (c, y) in Choice::ALL.iter().zip(compact) {
                let d = host_cxx::differing(y, &base[rows_of.clone()]);
                assert_eq!(d, 0, "{rows}x{cols} {c:?} of the compact tiles");
            }
            let split = &compact[Choice::ALL.len()..Choice::ALL.len() + 4];
            let kernels = SPLIT_KERNELS.iter().chain(&SPLIT_KERNELS_X4);
            for (k, y) in kernels.zip(split) {
                let d = host_cxx::differing(y, &base[rows_of.clone()]);
                assert_eq!(d, 0, "{rows}x{cols} {k}_b16");
            }
            // Control: the pairs' halves swapped change the bits.
            assert_ne!(
                host_cxx::differing(&compact[Choice::ALL.len() + 4], &base[rows_of]),
                0
            );
        }
        // The check finds the bf16 scales, and the planted bias that is not one.
        assert_eq!(all.wide, [0, 1], "{rows}x{cols}: the scales' check");
    }
}

#[test]
fn the_launcher_picks_a_choice_that_fits() {
    for cols in [64, 4096, 8192, 16384, 32768] {
        for n in 1..=100 {
            let c = Choice::for_call(4096, cols, n);
            assert!(c.fits(n, cols), "{n} x {cols}: {c:?}");
            assert_eq!(c.staged, n == 1 && cols <= 16384, "{n} x {cols}");
        }
    }
    // Control: a staged choice for 8 rows of 8192 columns (a block's 4 rows: 128 KiB) does not
    // fit.
    let staged = Choice {
        rt: 1,
        staged: true,
    };
    assert!(!staged.fits(8, 8192));
}

/// The split norms' launch gives the copy of the row the kernels take (a mismatch would
/// overrun their shared memory), and the wide norms' the row their threads hold.
#[test]
fn the_split_norms_stash_is_the_kernels() {
    let src = include_str!("../../kernels/norm_split.cu");
    let want = format!("#define TF_NORM_STASH {}\n", crate::ops::NORM_STASH);
    assert!(src.contains(&want));
    // And the wide norms' widest row is what their threads hold.
    let hold = crate::ops::WIDE_NORM_WIDTH / crate::ops::WIDE_NORM_THREADS;
    assert!(host_cxx::common().contains(&format!("#define TF_HOLD {hold}\n")));
}

/// The launcher's warps a block are the kernels' (a mismatch would leave groups unsummed).
#[test]
fn warps_a_block_are_the_kernels() {
    let src = include_str!("../../kernels/mma.cu");
    assert!(src.contains(&format!("#define MMA_KW {WARPS} ")));
}

/// The entries whose `_b16` twins the sources define (the arguments' first name of each
/// twinning macro's use in kernels/mma.cu and kernels/moe.cu), sorted.
fn twinned_in_sources() -> Vec<String> {
    let src = [
        include_str!("../../kernels/mma.cu"),
        include_str!("../../kernels/moe.cu"),
    ];
    let macros = [
        "TF_MMA_ENTRY(",
        "TF_MMA_SPLIT_ENTRY(",
        "TF_MOE_MMA_ENTRY(",
        "TF_MOE_MMA_SPLIT_ENTRY(",
        "TF_MOE_MMA_ONE_ENTRY(",
        "TF_MOE_MMA_XIN_ENTRY(",
        "TF_MOE_MMA_ONE_RELU2_ENTRY(",
        "TF_MMA_RELU2_ENTRY(",
        "TF_MMA_XIN_ENTRY(",
    ];
    let mut names: Vec<String> = src
        .iter()
        .flat_map(|s| s.lines())
        .filter_map(|l| macros.iter().find_map(|m| l.strip_prefix(m)))
        .filter_map(|rest| rest.split([',', ')']).next())
        .map(|n| n.trim().to_string())
        .collect();
    names.sort();
    names
}

/// Every entry the sources twin is a tile reader and every tile reader is twinned, so
/// `entry_for` never names a `_b16` entry the program lacks or leaves one unread. Planted: the
/// list without its last reader must differ.
#[test]
fn tile_readers_are_the_entries_the_sources_twin() {
    let twinned = twinned_in_sources();
    let mut readers: Vec<String> = TILE_READERS.iter().map(|n| n.to_string()).collect();
    readers.sort();
    assert_eq!(twinned, readers);
    let planted: Vec<String> = readers[..readers.len() - 1].to_vec();
    assert_ne!(twinned, planted, "the planted short list was not caught");
}

/// The entries mma.cu's macros define by a name they are given at a line's start in `src`: the
/// first argument of a `..._SB(` or `TF_PROBE_TILES(` macro, and `tf_probe_stream_dD` of
/// `TF_PROBE_STREAM(D)`.
fn named_whole(src: &str) -> Vec<String> {
    fn first(l: &str) -> Option<&str> {
        l.split_once('(')?.1.split([',', ')']).next().map(str::trim)
    }
    src.lines()
        .filter(|l| l.starts_with("TF_"))
        .filter_map(|l| {
            if l.starts_with("TF_PROBE_STREAM(") {
                Some(format!("tf_probe_stream_d{}", first(l)?))
            } else if l.contains("_SB(") || l.starts_with("TF_PROBE_TILES(") {
                first(l).map(str::to_string)
            } else {
                None
            }
        })
        .collect()
}

/// Every entry mma.cu defines by a whole name (the probes) is in the program's kernel list, so
/// `Gpu::launcher` finds it. Planted: names the list lacks, one of each macro, are caught.
#[test]
fn entries_named_whole_are_in_the_kernel_list() {
    let names = crate::device::all_kernel_names();
    let named = named_whole(include_str!("../../kernels/mma.cu"));
    for p in probe_kernel_names() {
        assert!(named.iter().any(|n| n == p), "{p} not found in {named:?}");
    }
    for n in &named {
        assert!(
            names.iter().any(|k| k == n),
            "{n} is not in all_kernel_names"
        );
    }
    let planted = "TF_MMA_SPLIT_ENTRY_SB(tf_not_listed, 1, 1, u32, 2)\n\
                   TF_PROBE_TILES(tf_probe_tiles_d3, 3, 0)\n\
                   TF_PROBE_STREAM(3)";
    let missing = named_whole(planted);
    assert_eq!(missing.len(), 3, "{missing:?}");
    for n in &missing {
        assert!(!names.iter().any(|k| k == n), "{n}");
    }
}

/// The grouped expert products' host harness: reads (experts, rows each, cols, slots, staged),
/// the stacked rows-layout bytes, the offsets and the gathered x; tiles the stack, runs
/// `tf_moe_mma_mlx4` (or its staged twin) and writes the gathered y.
fn moe_harness() -> String {
    let moe = include_str!("../../kernels/moe.cu");
    let block_expert = host_cxx::extract(moe, "__device__ __forceinline__ int tf_moe_block_expert");
    let body = [
        "template <int RT, int STAGED, int F, class SB, int RELU2 = 0>\n__device__ __forceinline__ void tf_moe_mma_group(",
        "template <int RT, int STAGED, int F, class SB>\n__device__ __forceinline__ void tf_moe_mma(",
    ]
    .map(|head| host_cxx::extract(moe, head))
    .join("\n");
    let (start, end) = (
        moe.find("#define TF_MOE_MMA_ENTRY")
            .expect("moe.cu's mma entries"),
        moe.find(LAST_ENTRY).expect("moe.cu's last mma entry"),
    );
    let entries = &moe[start..end + LAST_ENTRY.len()];
    let split = [
        "__device__ __forceinline__ int tf_moe_split_group(",
        "extern \"C\" __global__ void tf_moe_gather_split(",
        "extern \"C\" __global__ void tf_moe_relu2(",
        "extern \"C\" __global__ void tf_moe_relu2_split(",
    ]
    .map(|head| host_cxx::extract(moe, head))
    .join("\n");
    format!(
        "{prelude}\n{source}\n{block_expert}\n{body}\n{entries}\n{split}\n\
         int main(int argc, char** argv) {{\n\
         \x20   FILE *fi, *fo;\n\
         \x20   if (!tf_open_io(argc, argv, &fi, &fo)) return 1;\n\
         \x20   int head[6];\n\
         \x20   if (fread(head, 4, 6, fi) != 6) return 1;\n\
         \x20   const int ne = head[0], rows = head[1], cols = head[2], slots = head[3], compact = head[4] >= 10, staged = head[4] % 10;\n\
         \x20   const size_t nt = (size_t)ne * rows / 16 * (cols / 64);\n\
         \x20   std::vector<u8> src((size_t)ne * rows * cols / 32 * 24), tiles(nt * 640);\n\
         \x20   std::vector<int> offsets(ne + 1);\n\
         \x20   std::vector<float> x((size_t)slots * cols), y((size_t)slots * rows);\n\
         \x20   if (fread(src.data(), 1, src.size(), fi) != src.size() || fread(offsets.data(), 4, ne + 1, fi) != (size_t)ne + 1 || fread(x.data(), 4, x.size(), fi) != x.size()) return 1;\n\
         \x20   tf_launch(D3{{(unsigned)((nt * 32 + 255) / 256), 1, 1}}, 256, 0, [&] {{ tf_mma_tile_mlx4(src.data(), tiles.data(), ne * rows, cols); }});\n\
         \x20   std::vector<u8> tiles16(nt * 576);\n\
         \x20   tf_launch(D3{{(unsigned)((nt * 32 + 255) / 256), 1, 1}}, 256, 0, [&] {{ tf_mma_tile_mlx4_b16(src.data(), tiles16.data(), ne * rows, cols); }});\n\
         \x20   const u8* W = compact ? tiles16.data() : tiles.data();\n\
         \x20   const D3 grid{{(unsigned)((rows + 31) / 32), (unsigned)std::min(ne, slots), 1}};\n\
         \x20   std::vector<float> xg(x.size()), sums((size_t)slots * cols / 64), act(x.size()), sums2(sums.size());\n\
         \x20   std::vector<uint4> parts((size_t)slots * cols / 4), parts2(parts.size());\n\
         \x20   std::vector<int> order(slots);\n\
         \x20   for (int p = 0; p < slots; p++) order[p] = p;\n\
         \x20   if (staged == 3) {{\n\
         \x20       tf_launch(D3{{(unsigned)slots, (unsigned)((cols / 64 + 3) / 4), 1}}, 128, 0, [&] {{ tf_moe_relu2_split(x.data(), act.data(), parts.data(), sums.data(), cols); }});\n\
         \x20       tf_launch(D3{{(unsigned)((x.size() + 255) / 256), 1, 1}}, 256, 0, [&] {{ tf_moe_relu2(x.data(), xg.data(), (int)x.size()); }});\n\
         \x20       tf_launch(D3{{(unsigned)((cols / 64 + 3) / 4), (unsigned)((slots + 7) / 8), 1}}, 128, 0, [&] {{ tf_mma_split(xg.data(), parts2.data(), sums2.data(), slots, cols); }});\n\
         \x20       for (auto* v : {{&act, &xg, &sums, &sums2}}) fwrite(v->data(), 4, v->size(), fo);\n\
         \x20       fwrite(parts.data(), 16, parts.size(), fo); fwrite(parts2.data(), 16, parts2.size(), fo);\n\
         \x20       fclose(fo);\n\
         \x20       return 0;\n\
         \x20   }}\n\
         \x20   if (head[5]) {{\n\
         \x20       if (rows != cols) return 1;\n\
         \x20       std::vector<float> up(y.size()), act2(y.size()), down(y.size()), asums(y.size() / 64, NAN);\n\
         \x20       std::vector<uint4> aparts(y.size() / 4);\n\
         \x20       const bool r1 = staged == 9;\n\
         \x20       if (head[5] >= 4) {{\n\
         \x20           const int n = slots, tl = rows / 16, dt = tl * (cols / 64), rt = r1 ? 1 : 2;\n\
         \x20           std::vector<u8> dtiles((size_t)dt * (compact ? 576 : 640));\n\
         \x20           tf_launch(D3{{(unsigned)((dt * 32 + 255) / 256), 1, 1}}, 256, 0, [&] {{ (compact ? tf_mma_tile_mlx4_b16 : tf_mma_tile_mlx4)(src.data(), dtiles.data(), rows, cols); }});\n\
         \x20           tf_launch(D3{{(unsigned)((cols / 64 + 3) / 4), (unsigned)((n + 7) / 8), 1}}, 128, 0, [&] {{ tf_mma_split(x.data(), parts.data(), sums.data(), n, cols); }});\n\
         \x20           const D3 g{{(unsigned)((tl + rt - 1) / rt), 1, 1}};\n\
         \x20           auto plain = [&](const uint4* xp, const float* xs, float* out) {{ tf_launch(g, {dense}, 0, [&] {{ (rt == 1 ? (compact ? tf_mma_mlx4_r1_split_x4_b16 : tf_mma_mlx4_r1_split_x4) : (compact ? tf_mma_mlx4_r2_split_x4_b16 : tf_mma_mlx4_r2_split_x4))(dtiles.data(), xp, xs, out, n, rows, cols, 0, tl); }}); }};\n\
         \x20           if (head[5] == 4) {{\n\
         \x20               plain(parts.data(), sums.data(), up.data());\n\
         \x20               tf_launch(D3{{(unsigned)n, (unsigned)((rows / 64 + 3) / 4), 1}}, 128, 0, [&] {{ tf_moe_relu2_split(up.data(), act2.data(), aparts.data(), asums.data(), rows); }});\n\
         \x20               plain(aparts.data(), asums.data(), down.data());\n\
         \x20           }} else {{\n\
         \x20               tf_launch(g, {dense}, 0, [&] {{ (rt == 1 ? (compact ? tf_mma_mlx4_r1_split_x4_relu2_b16 : tf_mma_mlx4_r1_split_x4_relu2) : (compact ? tf_mma_mlx4_r2_split_x4_relu2_b16 : tf_mma_mlx4_r2_split_x4_relu2))(dtiles.data(), parts.data(), sums.data(), up.data(), n, rows, cols, 0, tl, act2.data(), aparts.data()); }});\n\
         \x20               if (head[5] == 6) plain(aparts.data(), asums.data(), down.data());\n\
         \x20               else tf_launch(g, {dense}, 0, [&] {{ (rt == 1 ? (compact ? tf_mma_mlx4_r1_split_x4_xin_b16 : tf_mma_mlx4_r1_split_x4_xin) : (compact ? tf_mma_mlx4_r2_split_x4_xin_b16 : tf_mma_mlx4_r2_split_x4_xin))(dtiles.data(), aparts.data(), asums.data(), down.data(), n, rows, cols, 0, tl); }});\n\
         \x20           }}\n\
         \x20       }} else {{\n\
         \x20           tf_launch(D3{{(unsigned)((cols / 64 + 3) / 4), 1, 1}}, 128, 0, [&] {{ tf_mma_split(x.data(), parts.data(), sums.data(), 1, cols); }});\n\
         \x20           std::vector<int> picks(slots), where(slots);\n\
         \x20           for (int e = 0; e < ne; e++) for (int p = offsets[e]; p < offsets[e + 1]; p++) picks[p] = e, where[p] = p;\n\
         \x20           const D3 g1{{r1 ? (unsigned)((rows + 15) / 16) : grid.x, (unsigned)slots, 1}}, g2{{r1 ? (unsigned)((rows + 15) / 16) : grid.x, grid.y, 1}};\n\
         \x20           if (head[5] == 1) {{\n\
         \x20               tf_launch(g1, {threads}, 0, [&] {{ (r1 ? (compact ? tf_moe_mma_mlx4_split_r1_x4_one_b16 : tf_moe_mma_mlx4_split_r1_x4_one) : (compact ? tf_moe_mma_mlx4_split_x4_one_b16 : tf_moe_mma_mlx4_split_x4_one))(W, parts.data(), sums.data(), up.data(), picks.data(), where.data(), rows, cols, ne); }});\n\
         \x20               tf_launch(D3{{(unsigned)slots, (unsigned)((rows / 64 + 3) / 4), 1}}, 128, 0, [&] {{ tf_moe_relu2_split(up.data(), act2.data(), aparts.data(), asums.data(), rows); }});\n\
         \x20               tf_launch(g2, {threads}, 0, [&] {{ (r1 ? (compact ? tf_moe_mma_mlx4_split_r1_x4_b16 : tf_moe_mma_mlx4_split_r1_x4) : (compact ? tf_moe_mma_mlx4_split_x4_b16 : tf_moe_mma_mlx4_split_x4))(W, aparts.data(), asums.data(), down.data(), offsets.data(), rows, cols, ne); }});\n\
         \x20           }} else {{\n\
         \x20               tf_launch(g1, {threads}, 0, [&] {{ (r1 ? (compact ? tf_moe_mma_mlx4_split_r1_x4_one_relu2_b16 : tf_moe_mma_mlx4_split_r1_x4_one_relu2) : (compact ? tf_moe_mma_mlx4_split_x4_one_relu2_b16 : tf_moe_mma_mlx4_split_x4_one_relu2))(W, parts.data(), sums.data(), up.data(), picks.data(), where.data(), rows, cols, ne, act2.data(), aparts.data()); }});\n\
         \x20               if (head[5] == 3) tf_launch(g2, {threads}, 0, [&] {{ (r1 ? (compact ? tf_moe_mma_mlx4_split_r1_x4_b16 : tf_moe_mma_mlx4_split_r1_x4) : (compact ? tf_moe_mma_mlx4_split_x4_b16 : tf_moe_mma_mlx4_split_x4))(W, aparts.data(), asums.data(), down.data(), offsets.data(), rows, cols, ne); }});\n\
         \x20               else tf_launch(g2, {threads}, 0, [&] {{ (r1 ? (compact ? tf_moe_mma_mlx4_split_r1_x4_xin_b16 : tf_moe_mma_mlx4_split_r1_x4_xin) : (compact ? tf_moe_mma_mlx4_split_x4_xin_b16 : tf_moe_mma_mlx4_split_x4_xin))(W, aparts.data(), asums.data(), down.data(), offsets.data(), rows, cols, ne); }});\n\
         \x20           }}\n\
         \x20       }}\n\
         \x20       for (auto* v : {{&up, &act2, &down}}) fwrite(v->data(), 4, v->size(), fo);\n\
         \x20       fwrite(aparts.data(), 16, aparts.size(), fo);\n\
         \x20       fclose(fo);\n\
         \x20       return 0;\n\
         \x20   }}\n\
         \x20   if (staged >= 8) {{\n\
         \x20       tf_launch(D3{{(unsigned)((cols / 64 + 3) / 4), 1, 1}}, 128, 0, [&] {{ tf_mma_split(x.data(), parts.data(), sums.data(), 1, cols); }});\n\
         \x20       std::vector<int> picks(slots), where(slots);\n\
         \x20       for (int e = 0; e < ne; e++) for (int p = offsets[e]; p < offsets[e + 1]; p++) picks[p] = e, where[p] = p;\n\
         \x20       if (staged == 8) tf_launch(D3{{grid.x, (unsigned)slots, 1}}, {threads}, 0, [&] {{ (compact ? tf_moe_mma_mlx4_split_x4_one_b16 : tf_moe_mma_mlx4_split_x4_one)(W, parts.data(), sums.data(), y.data(), picks.data(), where.data(), rows, cols, ne); }});\n\
         \x20       else tf_launch(D3{{(unsigned)((rows + 15) / 16), (unsigned)slots, 1}}, {threads}, 0, [&] {{ (compact ? tf_moe_mma_mlx4_split_r1_x4_one_b16 : tf_moe_mma_mlx4_split_r1_x4_one)(W, parts.data(), sums.data(), y.data(), picks.data(), where.data(), rows, cols, ne); }});\n\
         \x20   }} else if (staged == 2 || staged >= 4) {{\n\
         \x20       tf_launch(D3{{(unsigned)slots, (unsigned)((cols / 64 + 3) / 4), 1}}, 128, 0, [&] {{ tf_moe_gather_split(x.data(), order.data(), offsets.data(), xg.data(), parts.data(), sums.data(), 1, cols, ne); }});\n\
         \x20       if (staged == 5) tf_launch(D3{{(unsigned)((cols / 64 + 3) / 4), (unsigned)((slots + 7) / 8), 1}}, 128, 0, [&] {{ tf_plant_mma_split_sums(xg.data(), parts.data(), sums.data(), slots, cols); }});\n\
         \x20       const D3 grid1{{(unsigned)((rows + 15) / 16), grid.y, 1}};\n\
         \x20       if (staged == 2 || staged == 5) tf_launch(grid, {threads}, 0, [&] {{ (compact ? tf_moe_mma_mlx4_split_b16 : tf_moe_mma_mlx4_split)(W, parts.data(), sums.data(), y.data(), offsets.data(), rows, cols, ne); }});\n\
         \x20       else if (staged == 4) tf_launch(grid1, {threads}, 0, [&] {{ (compact ? tf_moe_mma_mlx4_split_r1_b16 : tf_moe_mma_mlx4_split_r1)(W, parts.data(), sums.data(), y.data(), offsets.data(), rows, cols, ne); }});\n\
         \x20       else if (staged == 6) tf_launch(grid, {threads}, 0, [&] {{ (compact ? tf_moe_mma_mlx4_split_x4_b16 : tf_moe_mma_mlx4_split_x4)(W, parts.data(), sums.data(), y.data(), offsets.data(), rows, cols, ne); }});\n\
         \x20       else tf_launch(grid1, {threads}, 0, [&] {{ (compact ? tf_moe_mma_mlx4_split_r1_x4_b16 : tf_moe_mma_mlx4_split_r1_x4)(W, parts.data(), sums.data(), y.data(), offsets.data(), rows, cols, ne); }});\n\
         \x20   }} else if (staged) tf_launch(grid, {threads}, (size_t)(cols / 64) * 256, [&] {{ (compact ? tf_moe_mma_mlx4_staged_b16 : tf_moe_mma_mlx4_staged)(W, x.data(), y.data(), offsets.data(), rows, cols, ne); }});\n\
         \x20   else tf_launch(grid, {threads}, 0, [&] {{ (compact ? tf_moe_mma_mlx4_b16 : tf_moe_mma_mlx4)(W, x.data(), y.data(), offsets.data(), rows, cols, ne); }});\n\
         \x20   fwrite(y.data(), 4, y.size(), fo);\n\
         \x20   fclose(fo);\n\
         \x20   return 0;\n\
         }}\n",
        prelude = host_cxx::SIMT_PRELUDE,
        source = include_str!("../../kernels/mma.cu"),
        threads = 32 * MOE_WARPS,
        dense = 32 * WARPS,
    )
}

/// moe.cu's last grouped product entry (the harness takes the entries up to it).
const LAST_ENTRY: &str = "TF_MOE_MMA_ONE_RELU2_ENTRY(tf_moe_mma_mlx4_split_x4_one_relu2, 2)";

/// [`moe_harness`] built, with `ne` random MLX 4-bit experts of `rows` x `cols` stacked.
struct MoeRig {
    dir: std::path::PathBuf,
    exe: std::path::PathBuf,
    src: Vec<u8>,
    head: [usize; 3],
}

impl MoeRig {
    /// None without a C++ compiler; `wf`: the stacked rows in f64.
    fn new(
        name: &str,
        rng: &mut Rng,
        ne: usize,
        rows: usize,
        cols: usize,
    ) -> Option<(MoeRig, Vec<f64>)> {
        let cxx = host_cxx::compiler()?;
        let (dir, exe) = host_cxx::build(&cxx, name, &moe_harness());
        let hw = HostWeights::random_mlx(4, 64, FloatType::BF16, ne * rows, cols, rng);
        let src = device_bytes(&hw.packed())
            .expect("rows layout")
            .into_owned();
        let wf = (0..ne * rows).flat_map(|j| hw.row_f64(j)).collect();
        Some((
            MoeRig {
                dir,
                exe,
                src,
                head: [ne, rows, cols],
            },
            wf,
        ))
    }

    /// The harness's output for x (rows of `cols`) routed by `offsets`, in `mode` and `fold`.
    fn run(&self, offsets: &[i32], x: &[f32], mode: usize, fold: usize) -> Vec<f32> {
        let [ne, rows, cols] = self.head;
        let slots = x.len() / cols;
        let mut input = Vec::new();
        for v in [ne, rows, cols, slots, mode, fold] {
            input.extend((v as i32).to_le_bytes());
        }
        input.extend_from_slice(&self.src);
        input.extend(offsets.iter().flat_map(|v| v.to_le_bytes()));
        input.extend(x.iter().flat_map(|v| v.to_le_bytes()));
        let label = format!("moe-{slots}-{mode}-{fold}");
        host_cxx::floats(&host_cxx::run(&self.dir, &self.exe, &label, &input))
    }
}

#[test]
fn grouped_expert_products_match_the_reference_and_a_row_keeps_its_bits() {
    let mut rng = Rng::new(0x3a3a_0002);
    let (ne, rows, cols) = (4usize, 32usize, 256usize);
    let Some((rig, wf)) = MoeRig::new("moe_mma", &mut rng, ne, rows, cols) else {
        return;
    };
    // mode 0: x as it is; 1: staged; 2: gathered and split (tf_moe_gather_split); 3: relu²
    // split against relu² then tf_mma_split (act, act, sums, sums, parts, parts); 4: 2 with
    // one tile a block; 5: 2 with the planted split's sums (f32 from the gathered rows); 6 and
    // 7: 2 and 4 with 4 x rows at a time (_x4); 8 and 9: row 0 alone split (tf_mma_split),
    // read by every pick, a block row a pick, two tiles a block and one (_x4_one,
    // _r1_x4_one); 10 and up: that mode of the compact tiles.
    let run = |offsets: &[i32], x: &[f32], mode: usize| rig.run(offsets, x, mode, 0);
    // Expert 1 empty, expert 3 with 9 rows (two blocks of x rows).
    let offsets = [0, 2, 2, 5, 14];
    let x: Vec<f32> = (0..14 * cols).map(|_| rng.uniform(-1.0, 1.0)).collect();
    let y = run(&offsets, &x, 0);
    for (mode, what) in [
        (2, "two tiles a block"),
        (4, "one tile a block"),
        (6, "two tiles a block, 4 x rows at a time"),
        (7, "one tile a block, 4 x rows at a time"),
    ] {
        let split = run(&offsets, &x, mode);
        let d = host_cxx::differing(&split, &y);
        assert_eq!(d, 0, "gathered and split, {what}: the products' bits");
    }
    // Control: the split's sums taken another way change the products' bits.
    assert_ne!(host_cxx::differing(&run(&offsets, &x, 5), &y), 0);
    // The compact tiles (mode + 10, the `_b16` entries): each mode's bits.
    for mode in [0, 2, 4, 6, 7] {
        let d = host_cxx::differing(&run(&offsets, &x, mode + 10), &run(&offsets, &x, mode));
        assert_eq!(d, 0, "mode {mode} of the compact tiles");
    }
    let relu = run(&offsets, &x, 3);
    let len = x.len();
    let (act, rest) = relu.split_at(len);
    let (act2, rest) = rest.split_at(len);
    assert_eq!(
        host_cxx::differing(act, act2),
        0,
        "relu² split: relu²'s bits"
    );
    let (sums, parts) = rest.split_at(rest.len() - 2 * len);
    let (sums, sums2) = sums.split_at(sums.len() / 2);
    assert_eq!(host_cxx::differing(sums, sums2), 0, "relu² split: the sums");
    let (parts, parts2) = parts.split_at(len);
    assert_eq!(
        host_cxx::differing(parts, parts2),
        0,
        "relu² split: the parts"
    );
    assert!(act.iter().any(|&v| v > 0.0), "relu² left something");
    for e in 0..ne {
        let (a, b) = (offsets[e] as usize, offsets[e + 1] as usize);
        let w = &wf[e * rows * cols..(e + 1) * rows * cols];
        let err = max_rel_err(
            &y[a * rows..b * rows],
            w,
            cols,
            &x[a * cols..b * cols],
            b - a,
        );
        assert!(err <= 2e-6, "expert {e}: error {err:.2e}");
    }
    // One row a group (a one-token round, staged), rows taken from the groups above.
    let picks = [0usize, 2, 13];
    let one: Vec<f32> = picks
        .iter()
        .flat_map(|&p| x[p * cols..(p + 1) * cols].to_vec())
        .collect();
    let y1 = run(&[0, 1, 1, 2, 3], &one, 1);
    let d = host_cxx::differing(&run(&[0, 1, 1, 2, 3], &one, 11), &y1);
    assert_eq!(d, 0, "staged, of the compact tiles");
    for (i, &p) in picks.iter().enumerate() {
        assert_eq!(
            host_cxx::differing(&y1[i * rows..(i + 1) * rows], &y[p * rows..(p + 1) * rows]),
            0,
            "row {p} alone (staged) differs from its place in its group"
        );
    }
    // Control: the same row under another expert gives other values.
    let y2 = run(&[0, 0, 1, 2, 3], &one, 1);
    assert_ne!(host_cxx::differing(&y2[..rows], &y[..rows]), 0);
    // A one-token round: its row split once and read by each of its three picks gives the
    // bits of the gathered copies split (mode 6), in both tile forms; only row 0 is split, so
    // a pick reading its own row of the split would read zeros.
    let token = &x[13 * cols..14 * cols];
    let copies: Vec<f32> = (0..3).flat_map(|_| token.to_vec()).collect();
    let gathered = run(&[0, 1, 1, 2, 3], &copies, 6);
    assert_eq!(
        &gathered[2 * rows..],
        &y[13 * rows..],
        "the token's pick of expert 3"
    );
    for mode in [8, 9, 18, 19] {
        let d = host_cxx::differing(&run(&[0, 1, 1, 2, 3], &copies, mode), &gathered);
        assert_eq!(d, 0, "mode {mode}: the token's row split once");
    }
    // Control: another row split once gives other products.
    let other: Vec<f32> = x[..3 * cols].to_vec();
    assert_ne!(
        host_cxx::differing(&run(&[0, 1, 1, 2, 3], &other, 8), &gathered),
        0
    );
}

/// A one-token round's up product with relu² and its split made as it stores (the `_one_relu2`
/// entries), then the down product summing X in place (`_xin`), against the up product,
/// `tf_moe_relu2_split` and the down product reading its sums: the same up, act, parts and
/// down, bit for bit, both tile forms, one tile a block and two; and the same of the dense
/// products (`_relu2`, `_xin`) at three rows. Planted: the sums-reading down product after the
/// fold (whose sums are NaN) must differ.
#[test]
fn relu2_made_by_the_up_product_gives_the_split_and_the_down_products_bits() {
    let mut rng = Rng::new(0x3a3a_0003);
    let (ne, dim, slots) = (4usize, 128usize, 3usize);
    let Some((rig, _)) = MoeRig::new("moe_relu2_fold", &mut rng, ne, dim, dim) else {
        return;
    };
    // Three picks of one token (expert 1 not picked); only row 0, the token's, is read.
    let offsets = [0i32, 1, 1, 2, 3];
    let x: Vec<f32> = (0..slots * dim).map(|_| rng.uniform(-1.0, 1.0)).collect();
    // fold 1: up, relu² split, down; 2: up with relu² folded, down in place; 3: the fold, then
    // the down product that reads the (unmade) sums.
    let run = |mode: usize, fold: usize| {
        let out = rig.run(&offsets, &x, mode, fold);
        assert_eq!(out.len(), 4 * slots * dim, "up, act, down, parts");
        out
    };
    let len = slots * dim;
    for mode in [8, 9, 18, 19] {
        let (want, got) = (run(mode, 1), run(mode, 2));
        for (i, what) in ["up", "act", "down", "parts"].iter().enumerate() {
            let part = i * len..(i + 1) * len;
            let d = host_cxx::differing(&got[part.clone()], &want[part]);
            assert_eq!(d, 0, "mode {mode}: {what}");
        }
        let act = &want[len..2 * len];
        assert!(
            act.iter().any(|&v| v > 0.0) && act.contains(&0.0),
            "relu² both ways"
        );
        let planted = run(mode, 3);
        let d = host_cxx::differing(&planted[2 * len..3 * len], &want[2 * len..3 * len]);
        assert_ne!(
            d, 0,
            "mode {mode}: the down product read the sums the fold left unmade"
        );
    }
    // The dense products of the three rows (one and two tiles a block, both tile forms) of
    // expert 0's matrix: fold 4, the split product, relu² split and the split product; 5, the
    // `_relu2` and `_xin` entries; 6, the `_relu2` entry, then the sums-reading product.
    for mode in [8, 9, 18, 19] {
        let (want, got) = (run(mode, 4), run(mode, 5));
        for (i, what) in ["up", "act", "down", "parts"].iter().enumerate() {
            let part = i * len..(i + 1) * len;
            let d = host_cxx::differing(&got[part.clone()], &want[part]);
            assert_eq!(d, 0, "dense, mode {mode}: {what}");
        }
        let planted = run(mode, 6);
        let d = host_cxx::differing(&planted[2 * len..3 * len], &want[2 * len..3 * len]);
        assert_ne!(
            d, 0,
            "dense, mode {mode}: the sums the fold left unmade were read"
        );
    }
}

/// The host emulation's source of the split norms (kernels/norm_split.cu) and what they use:
/// the prelude, common.cuh, mma.cu, ops.cu.
fn norms_host() -> String {
    format!(
        "{}\n{}\n{}\n{}\n{}\n",
        host_cxx::SIMT_PRELUDE,
        host_cxx::common(),
        include_str!("../../kernels/mma.cu"),
        include_str!("../../kernels/ops.cu"),
        include_str!("../../kernels/norm_split.cu"),
    )
}

/// A norm emulation's case: the i32s of `head`, eps 1e-5, then each vector's f32s.
fn norm_input(head: &[i32], vecs: &[&[f32]]) -> Vec<u8> {
    let mut b: Vec<u8> = head.iter().flat_map(|v| v.to_le_bytes()).collect();
    b.extend(1e-5f32.to_le_bytes());
    b.extend(
        vecs.iter()
            .flat_map(|v| v.iter())
            .flat_map(|v| v.to_le_bytes()),
    );
    b
}

/// Reads (n, width, add; eps; x, o, s, gain), add 0: no residual, 1: x + o, 2: x + (o + s);
/// writes the split norm's x, y, parts and sums, then the plain norm's x and y and
/// tf_mma_split's parts and sums of that y, then the planted split's sums of that y (f32 from
/// y: tf_plant_mma_split_sums), then the wide norm's x, y, parts and sums over three blocks a
/// row and over a block a group.
const NORM_SPLIT_MAIN: &str = r#"
static std::vector<float> vf(FILE* f, size_t n) { std::vector<float> v(n); if (std::fread(v.data(), 4, n, f) != n) std::exit(3); return v; }
int main(int argc, char** argv) {
    FILE *fi, *fo;
    if (!tf_open_io(argc, argv, &fi, &fo)) return 2;
    int h[3];
    float eps;
    if (std::fread(h, 4, 3, fi) != 3 || std::fread(&eps, 4, 1, fi) != 1) return 3;
    const int n = h[0], w = h[1], add = h[2];
    const size_t len = (size_t)n * w;
    auto x = vf(fi, len); auto o = vf(fi, len); auto s = vf(fi, len); auto g = vf(fi, w);
    auto xa = x, xb = x;
    std::vector<float> ya(len), yb(len), sa(len / 64), sb(len / 64);
    std::vector<uint4> pa(len / 4), pb(len / 4);
    tf_launch(D3{(unsigned)n, 1, 1}, 128, w <= 6144 ? 4 * (size_t)w : 0, [&] {
        if (add == 2) tf_add2_rms_norm_split(xa.data(), o.data(), s.data(), g.data(), ya.data(), pa.data(), sa.data(), w, eps);
        else if (add) tf_add_rms_norm_split(xa.data(), o.data(), g.data(), ya.data(), pa.data(), sa.data(), w, eps);
        else tf_rms_norm_split(xa.data(), g.data(), ya.data(), pa.data(), sa.data(), w, eps);
    });
    tf_launch(D3{(unsigned)n, 1, 1}, 128, 0, [&] {
        if (add == 2) tf_add2_rms_norm(xb.data(), o.data(), s.data(), g.data(), yb.data(), w, eps);
        else if (add) tf_add_rms_norm(xb.data(), o.data(), g.data(), yb.data(), w, eps);
        else tf_rms_norm(xb.data(), g.data(), yb.data(), w, eps);
    });
    const D3 grid{(unsigned)((w / 64 + 3) / 4), (unsigned)((n + 7) / 8), 1};
    tf_launch(grid, 128, 0, [&] { tf_mma_split(yb.data(), pb.data(), sb.data(), n, w); });
    std::vector<float> sp(len / 64);
    std::vector<uint4> pp(len / 4);
    tf_launch(grid, 128, 0, [&] { tf_plant_mma_split_sums(yb.data(), pp.data(), sp.data(), n, w); });
    std::fwrite(xa.data(), 4, len, fo); std::fwrite(ya.data(), 4, len, fo);
    std::fwrite(pa.data(), 4, len, fo); std::fwrite(sa.data(), 4, len / 64, fo);
    std::fwrite(xb.data(), 4, len, fo); std::fwrite(yb.data(), 4, len, fo);
    std::fwrite(pb.data(), 4, len, fo); std::fwrite(sb.data(), 4, len / 64, fo);
    std::fwrite(sp.data(), 4, len / 64, fo);
    // The wide norms: three blocks a row (uneven shares), then one a group.
    const unsigned threads = (unsigned)((w / 8 + 31) / 32 * 32), groups = (unsigned)(w / 64);
    for (unsigned blocks : {3u, groups}) {
        std::vector<float> xw(len), yw(len), sw(len / 64);
        std::vector<uint4> pw(len / 4);
        const size_t smem = 4 * (16 * ((size_t)w / 16 + 4) + 64 * ((groups + blocks - 1) / blocks));
        if (!add) xw = x;  // x is neither read back nor written
        tf_launch(D3{blocks, (unsigned)n, 1}, threads, smem, [&] {
            if (add == 2) tf_add2_rms_norm_split_wide(x.data(), xw.data(), o.data(), s.data(), g.data(), yw.data(), pw.data(), sw.data(), w, eps);
            else if (add) tf_add_rms_norm_split_wide(x.data(), xw.data(), o.data(), g.data(), yw.data(), pw.data(), sw.data(), w, eps);
            else tf_rms_norm_split_wide(x.data(), g.data(), yw.data(), pw.data(), sw.data(), w, eps);
        });
        std::fwrite(xw.data(), 4, len, fo); std::fwrite(yw.data(), 4, len, fo);
        std::fwrite(pw.data(), 4, len, fo); std::fwrite(sw.data(), 4, len / 64, fo);
    }
    std::fclose(fo);
    return 0;
}
"#;

/// The norms that split their rows (kernels/norm_split.cu) give the plain norms' x and y, and
/// the split tf_mma_split makes of that y, bit for bit, over one block a row or several (the
/// wide norms); the planted split's sums differ.
#[test]
fn split_norms_give_the_norms_bits_and_their_split() {
    let Some(cxx) = host_cxx::compiler() else {
        return;
    };
    let source = format!("{}{NORM_SPLIT_MAIN}", norms_host());
    let (dir, exe) = host_cxx::build(&cxx, "norm_split", &source);
    let mut rng = Rng::new(0x3a3a_0003);
    // 1024: the row held by 128 threads; 4160: the chunked path; 6208: split from y, not from
    // the copy in shared memory.
    for (n, w) in [(3usize, 1024usize), (2, 4160), (1, 6208)] {
        let (x, o) = (rng.vec_normal(n * w, 2.0), rng.vec_normal(n * w, 1.0));
        let s = rng.vec_normal(n * w, 1.0);
        let g = rng.vec_uniform(w, 0.5, 1.5);
        for add in [0, 1, 2] {
            let input = norm_input(&[n as i32, w as i32, add], &[&x, &o, &s, &g]);
            let label = format!("n{n}w{w}a{add}");
            let got = host_cxx::floats(&host_cxx::run(&dir, &exe, &label, &input));
            let one = 3 * n * w + n * w / 64;
            assert_eq!(got.len(), 4 * one + n * w / 64, "{label}");
            let (split, rest) = got.split_at(one);
            let (plain, rest) = rest.split_at(one);
            let (planted, wide) = rest.split_at(n * w / 64);
            assert_eq!(host_cxx::differing(split, plain), 0, "{label}");
            for (i, blocks) in wide.chunks(one).zip(["three blocks", "a block a group"]) {
                assert_eq!(host_cxx::differing(i, split), 0, "{label}: wide, {blocks}");
            }
            // Control: sums taken another way (f32 from y) are told apart.
            let sums = &split[3 * n * w..];
            assert_ne!(host_cxx::differing(sums, planted), 0, "{label}: the plant");
        }
    }
}

/// Reads (n, width, groups, z_stride, blocks; eps; y, z, gain); writes the gated norm's out and
/// tf_mma_split's parts and sums of it, then the wide gated norm's out, parts and sums over
/// `blocks` blocks a group, then the planted gated norm's out (a group's last element left out
/// of its sum of squares).
const GATED_SPLIT_MAIN: &str = r#"
static std::vector<float> vf(FILE* f, size_t n) { std::vector<float> v(n); if (std::fread(v.data(), 4, n, f) != n) std::exit(3); return v; }
int main(int argc, char** argv) {
    FILE *fi, *fo;
    if (!tf_open_io(argc, argv, &fi, &fo)) return 2;
    int h[5];
    float eps;
    if (std::fread(h, 4, 5, fi) != 5 || std::fread(&eps, 4, 1, fi) != 1) return 3;
    const int n = h[0], w = h[1], groups = h[2], zs = h[3];
    const unsigned blocks = (unsigned)h[4];
    const size_t len = (size_t)n * w;
    auto y = vf(fi, len); auto z = vf(fi, (size_t)n * zs); auto g = vf(fi, w);
    std::vector<float> oa(len), sa(len / 64), ob(len), sb(len / 64), op(len);
    std::vector<uint4> pa(len / 4), pb(len / 4);
    tf_launch(D3{(unsigned)n, (unsigned)groups, 1}, 512, 0, [&] {
        tf_mamba_gated_norm(y.data(), z.data(), zs, g.data(), eps, w, groups, oa.data());
    });
    const D3 grid{(unsigned)((w / 64 + 3) / 4), (unsigned)((n + 7) / 8), 1};
    tf_launch(grid, 128, 0, [&] { tf_mma_split(oa.data(), pa.data(), sa.data(), n, w); });
    const int gs = w / groups;
    const size_t smem = 4 * (16 * ((size_t)gs / 16 + 4) + 64 * ((gs / 64 + blocks - 1) / blocks));
    tf_launch(D3{blocks, (unsigned)groups, (unsigned)n}, 512, smem, [&] {
        tf_mamba_gated_norm_split_wide(y.data(), z.data(), zs, g.data(), eps, w, groups, ob.data(), pb.data(), sb.data());
    });
    tf_launch(D3{(unsigned)n, (unsigned)groups, 1}, 512, 0, [&] {
        tf_plant_mamba_gated_norm_short(y.data(), z.data(), zs, g.data(), eps, w, groups, op.data());
    });
    std::fwrite(oa.data(), 4, len, fo); std::fwrite(pa.data(), 4, len, fo); std::fwrite(sa.data(), 4, len / 64, fo);
    std::fwrite(ob.data(), 4, len, fo); std::fwrite(pb.data(), 4, len, fo); std::fwrite(sb.data(), 4, len / 64, fo);
    std::fwrite(op.data(), 4, len, fo);
    std::fclose(fo);
    return 0;
}
"#;

/// The wide gated norm (kernels/norm_split.cu) gives the gated norm's bits and the split
/// tf_mma_split makes of them, over uneven shares and over a block a 64-column group; the
/// planted gated norm's differ.
#[test]
fn the_wide_gated_norm_gives_the_gated_norms_bits_and_their_split() {
    let Some(cxx) = host_cxx::compiler() else {
        return;
    };
    let source = format!(
        "{}{}\n{GATED_SPLIT_MAIN}",
        norms_host(),
        include_str!("../../kernels/mamba.cu"),
    );
    let (dir, exe) = host_cxx::build(&cxx, "gated_split", &source);
    let mut rng = Rng::new(0x3a3a_0004);
    // (rows, width, groups, blocks a group): 3 blocks of a group's 4 split groups, one block a
    // split group, and a group of 2048 (two 64-groups a lane's run of 128).
    for (n, w, groups, blocks) in [
        (2usize, 1024usize, 4usize, 3usize),
        (1, 1024, 2, 8),
        (1, 4096, 2, 5),
    ] {
        let zs = w + 192;
        let y = rng.vec_normal(n * w, 1.0);
        let z = rng.vec_normal(n * zs, 2.0);
        let g = rng.vec_uniform(w, 0.5, 1.5);
        let head = [n, w, groups, zs, blocks].map(|v| v as i32);
        let input = norm_input(&head, &[&y, &z, &g]);
        let label = format!("n{n}w{w}g{groups}b{blocks}");
        let got = host_cxx::floats(&host_cxx::run(&dir, &exe, &label, &input));
        let one = 2 * n * w + n * w / 64;
        assert_eq!(got.len(), 2 * one + n * w, "{label}");
        let (plain, rest) = got.split_at(one);
        let (wide, planted) = rest.split_at(one);
        assert_eq!(host_cxx::differing(wide, plain), 0, "{label}");
        // Control: the planted norm's out is told apart.
        assert_ne!(
            host_cxx::differing(planted, &plain[..n * w]),
            0,
            "{label}: the plant"
        );
    }
}
