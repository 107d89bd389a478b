//! The `[q|k|v]` projection with RoPE and the KV append as its epilogue (`tf_mmf_*_norm_rope`)
//! against the two launches it replaces (`tf_mmf_*_norm_store`, then `tf_rope_append`), both
//! compiled for the host and run under the SIMT emulation: the rotated q rows, the key pool
//! and the value pool must be the same bits, for both pairings, rows in two tiles from two
//! slots; the planted control (the epilogue told the other pairing) must differ.

use super::weights;
use crate::weights::GpuFormat;
use tf_kernels::contract::Rng;

/// Reads one case from argv[1], writes the differing floats (q rows, key pool, value pool) of
/// the fused launch and of the planted one against the two separate launches to argv[2].
const MAIN: &str = r#"
typedef void (*Store)(const u8*, const float*, const float*, float, float*, int, int, int, int);
typedef void (*Rope)(const u8*, const float*, const float*, float, float*, int, int, int, int,
                     const float*, float*, float*, const int*, const int*, int, int, int, int,
                     int, int, int);
int main(int argc, char** argv) {
    FILE *fi, *fo;
    if (!tf_open_io(argc, argv, &fi, &fo)) return 2;
    int h[13];
    if (std::fread(h, 4, 13, fi) != 13) return 3;
    const int fmt = h[0], heads = h[1], kv = h[2], hd = h[3], pairing = h[4], n = h[5],
              cols = h[6], slots_n = h[7], layers = h[8], layer = h[9], cap = h[10],
              wlen = h[11], smem = h[12];
    std::vector<u8> w(wlen);
    std::vector<float> x((size_t)n * cols), g(cols), cs((size_t)n * hd);
    std::vector<int> slots(n), pos(n);
    float eps;
    if (std::fread(w.data(), 1, wlen, fi) != (size_t)wlen) return 3;
    if (std::fread(x.data(), 4, x.size(), fi) != x.size()) return 3;
    if (std::fread(g.data(), 4, g.size(), fi) != g.size()) return 3;
    if (std::fread(&eps, 4, 1, fi) != 1) return 3;
    if (std::fread(cs.data(), 4, cs.size(), fi) != cs.size()) return 3;
    if (std::fread(slots.data(), 4, n, fi) != (size_t)n) return 3;
    if (std::fread(pos.data(), 4, n, fi) != (size_t)n) return 3;
    const Store store = fmt == 0 ? tf_mmf_q4_1_norm_store : tf_mmf_bf16_norm_store;
    const Rope rope = fmt == 0 ? tf_mmf_q4_1_norm_rope : tf_mmf_bf16_norm_rope;
    const int rows = (heads + 2 * kv) * hd;
    const size_t pool = (size_t)slots_n * layers * cap * kv * hd;
    struct Out { std::vector<float> y, k, v; };
    auto fresh = [&] { return Out{std::vector<float>((size_t)n * rows, 7.0f), std::vector<float>(pool, 3.0f), std::vector<float>(pool, 5.0f)}; };
    Out a = fresh();
    tf_launch(D3{(unsigned)((rows + MMF_ROWS - 1) / MMF_ROWS), 1, 1}, MMF_THREADS, smem, [&] {
        store(w.data(), x.data(), g.data(), eps, a.y.data(), n, rows, cols, cols);
    });
    tf_launch(D3{(unsigned)n, 1, 1}, 128, 0, [&] {
        tf_rope_append(a.y.data(), cs.data(), a.k.data(), a.v.data(), slots.data(), pos.data(),
                       heads, kv, hd, hd / 2, pairing, layers, layer, cap);
    });
    const unsigned blocks = (unsigned)(((heads + kv) * hd / 2 + 3) / 4 + (kv * hd + 7) / 8);
    for (int planted = 0; planted < 2; planted++) {
        Out b = fresh();
        const int pr = planted ? 1 - pairing : pairing;
        tf_launch(D3{blocks, 1, 1}, MMF_THREADS, smem, [&] {
            rope(w.data(), x.data(), g.data(), eps, b.y.data(), n, rows, cols, cols, cs.data(),
                 b.k.data(), b.v.data(), slots.data(), pos.data(), heads, kv, hd, pr, layers,
                 layer, cap);
        });
        int differ = 0;
        auto bits = [](float f) { u32 u; std::memcpy(&u, &f, 4); return u; };
        for (int i = 0; i < n; i++)
            for (int c = 0; c < heads * hd; c++)
                differ += bits(a.y[(size_t)i * rows + c]) != bits(b.y[(size_t)i * rows + c]);
        for (size_t e = 0; e < pool; e++) differ += (bits(a.k[e]) != bits(b.k[e])) + (bits(a.v[e]) != bits(b.v[e]));
        std::fwrite(&differ, 4, 1, fo);
    }
    std::fclose(fo);
    return 0;
}
"#;

#[test]
fn rope_as_the_projection_epilogue_gives_the_separate_launches_bits() {
    let Some(cxx) = crate::host_cxx::compiler() else {
        return;
    };
    let src = format!("{}{MAIN}", super::harness::host_kernels());
    let (dir, exe) = crate::host_cxx::build(&cxx, "rope", &src);
    let mut rng = Rng::new(0x20fe);
    let (heads, kv, hd, slots, layers, layer, cap) = (3usize, 1usize, 64usize, 2, 2, 1, 8);
    // Two slots, three positions each, interleaved: six rows in tiles of four and two.
    let (slot, pos) = ([0i32, 1, 0, 1, 0, 1], [2i32, 0, 3, 1, 4, 2]);
    let n = slot.len();
    let mut failures = Vec::new();
    for (fmt, format, cols) in [
        (0, GpuFormat::Q4_1, 576usize),
        (0, GpuFormat::Q4_1, 3648),
        (1, GpuFormat::Bf16, 1000),
    ] {
        for pairing in [0i32, 1] {
            let rows = (heads + 2 * kv) * hd;
            let (_, bytes) = weights(format, rows, cols, &mut rng);
            let mut f = Vec::new();
            let smem = super::super::fused_smem_bytes_for(format, cols);
            for v in [
                fmt,
                heads,
                kv,
                hd,
                pairing as usize,
                n,
                cols,
                slots,
                layers,
                layer,
                cap,
            ]
            .into_iter()
            .map(|v| v as i32)
            .chain([bytes.len() as i32, smem as i32])
            {
                f.extend(v.to_le_bytes());
            }
            f.extend(&bytes);
            let floats = rng
                .vec_uniform(n * cols, -1.5, 1.5)
                .into_iter()
                .chain(rng.vec_uniform(cols, 0.5, 1.5))
                .chain([1e-5])
                .chain(rng.vec_uniform(n * hd, -1.0, 1.0));
            floats.for_each(|v| f.extend(v.to_le_bytes()));
            slot.iter()
                .chain(&pos)
                .for_each(|v| f.extend(v.to_le_bytes()));
            let out = crate::host_cxx::run(&dir, &exe, "rope", &f);
            let differ: Vec<i32> = out
                .chunks_exact(4)
                .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            let label = format!("{format:?} pairing {pairing}");
            if differ.first() != Some(&0) {
                failures.push(format!("{label}: {differ:?} floats differ"));
            }
            if differ.get(1).is_none_or(|&d| d == 0) {
                failures.push(format!("{label}: the planted pairing went uncaught"));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
