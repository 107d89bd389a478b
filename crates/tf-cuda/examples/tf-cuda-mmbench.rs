//! `tf-cuda-mmbench [--iters N] [--peak BYTES_PER_S] [--quick] [--only TEXT] [--hot]`: the
//! matmul kernels alone at the decode shapes of the synthetic models (Lightning and Bolt MLX
//! 4-bit, Bolt's bf16 router and latent projections, Llama-3-8B Q4_0, the default model's
//! SmolLM2 matrices, and one matrix of every other format; `--only`: the shapes whose label
//! contains TEXT), checked and timed.
//!
//! For each shape:
//! 1. Check: `ops::matmul` on the GPU at 1, 5 and 37 rows must give the CPU matmul's bits (the
//!    formats of `tf_slices`, MLX 4-bit and bf16: at 1 and 5 rows, that order's host reference's
//!    bits, and the largest difference from the CPU is printed); the fused kernel (no
//!    transform, store) must give the CPU's bits (at 37 rows as the
//!    tiled product; Llama shapes: the fused kernels must also take the shape, which the
//!    whole-row kernels refused). A planted control (the row-variant Q4_1 kernel) must differ
//!    from the CPU at 5 rows.
//! 2. Time: back-to-back launches between two CUDA events, cycling over enough copies of the
//!    weights that none is still in L2 when it is read again; microseconds per call, GB/s of
//!    weight bytes and the fraction of `--peak` (default 3.97e12 B/s, the synthetic bench's
//!    roofline) at 1, 4 and 16 rows (`--hot`: one copy, read again while still in L2, for what
//!    the kernel does when memory is not what holds it); for the shapes the fused kernels
//!    take, also the fused matmul (norm, store) at 1 to 64 rows, as `tf_mmf` and as the tiled
//!    `tf_mmg`.
//!
//! Prints PASS/FAIL last; exits non-zero on any mismatch or error.

use std::process::ExitCode;
use tf_cuda::device::time_us;
use tf_cuda::fused::{matmul_fused, Epilogue, TiledFromRows, XForm};
use tf_cuda::mma::{self, Choice};
use tf_cuda::weights::{device_bytes, geometry_kernel};
use tf_cuda::{ops, slices, Gpu, GpuFormat, GpuMatrix};
use tf_formats::gguf::GgmlType;
use tf_kernels::matmul::{matmul as cpu_matmul, FloatType, PackedMatrix, WeightData};
use tf_kernels::pool::Pool;

type Error = Box<dyn std::error::Error>;
type Res<T> = Result<T, Error>;

/// A weight layout to build.
#[derive(Clone, Copy, Debug)]
enum Layout {
    Gguf(GgmlType),
    Dense(FloatType),
    /// MLX affine, group 64, bf16 scales.
    Mlx(u8),
}

/// Host bytes of a matrix (owned) and a view of them.
struct HostMatrix {
    rows: usize,
    cols: usize,
    layout: Layout,
    a: Vec<u8>,
    scales: Vec<u8>,
    biases: Vec<u8>,
}

struct XorShift(u64);
impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
}

impl HostMatrix {
    fn random(layout: Layout, rows: usize, cols: usize, rng: &mut XorShift) -> HostMatrix {
        // Small scales (f16 0x2000 ~ 2^-7 varied in the low bits) so sums stay finite.
        let small_f16 = |r: &mut XorShift| 0x2000u16 | (r.next() as u16 & 0x03ff);
        let small_bf16 = |r: &mut XorShift| 0x3c00u16 | (r.next() as u16 & 0x007f);
        let (mut a, mut scales, mut biases) = (Vec::new(), Vec::new(), Vec::new());
        match layout {
            Layout::Gguf(ty) => {
                let (block, size, scale_at) = match ty {
                    GgmlType::Q4_0 => (32, 18, vec![0]),
                    GgmlType::Q4_1 => (32, 20, vec![0, 2]),
                    GgmlType::Q8_0 => (32, 34, vec![0]),
                    GgmlType::Q4K => (256, 144, vec![0, 2]),
                    _ => (256, 210, vec![208]), // Q6K
                };
                a = rng.bytes(rows * cols / block * size);
                for b in a.chunks_exact_mut(size) {
                    for &at in &scale_at {
                        b[at..at + 2].copy_from_slice(&small_f16(rng).to_le_bytes());
                    }
                }
            }
            Layout::Dense(ty) => {
                for _ in 0..rows * cols {
                    let v = rng.unit() * 0.1;
                    match ty {
                        FloatType::F32 => a.extend(v.to_le_bytes()),
                        FloatType::F16 => a.extend(half::f16::from_f32(v).to_bits().to_le_bytes()),
                        _ => a.extend(half::bf16::from_f32(v).to_bits().to_le_bytes()),
                    }
                }
            }
            Layout::Mlx(bits) => {
                a = rng.bytes(rows * cols * bits as usize / 8);
                for _ in 0..rows * cols / 64 {
                    scales.extend(small_bf16(rng).to_le_bytes());
                    biases.extend((small_bf16(rng) | 0x8000).to_le_bytes());
                }
            }
        }
        HostMatrix {
            rows,
            cols,
            layout,
            a,
            scales,
            biases,
        }
    }

    fn packed(&self) -> Res<PackedMatrix<'_>> {
        let data = match self.layout {
            Layout::Gguf(ty) => WeightData::Gguf { ty, bytes: &self.a },
            Layout::Dense(ty) => WeightData::Dense { ty, bytes: &self.a },
            Layout::Mlx(bits) => WeightData::MlxAffine {
                bits,
                group_size: 64,
                scale_ty: FloatType::BF16,
                words: &self.a,
                scales: &self.scales,
                biases: &self.biases,
            },
        };
        Ok(PackedMatrix::new(self.rows, self.cols, data)?)
    }
}

/// (label, layout, rows, cols, whether the fused kernels must take it)
fn shapes(quick: bool) -> Vec<(&'static str, Layout, usize, usize, bool)> {
    use Layout::*;
    let mut v = vec![
        ("lightning expert up", Mlx(4), 1856, 2688, false),
        ("lightning expert down", Mlx(4), 2688, 1856, false),
        ("lightning shared up", Mlx(4), 3712, 2688, false),
        ("lightning mamba out", Mlx(4), 2688, 4096, false),
        ("llama3-8b qkv", Gguf(GgmlType::Q4_0), 6144, 4096, true),
        ("llama3-8b o", Gguf(GgmlType::Q4_0), 4096, 4096, true),
        ("llama3-8b gate_up", Gguf(GgmlType::Q4_0), 28672, 4096, true),
        ("llama3-8b down", Gguf(GgmlType::Q4_0), 4096, 14336, true),
        ("q4_1 4096x4096", Gguf(GgmlType::Q4_1), 4096, 4096, true),
        ("bolt mamba in_proj", Mlx(4), 18560, 4096, false),
        ("bolt 9 experts up", Mlx(4), 9 * 2688, 1024, false),
        ("bolt shared up", Mlx(4), 5376, 4096, false),
        ("bolt mamba out", Mlx(4), 4096, 8192, false),
        ("bolt shared down", Mlx(4), 4096, 5376, false),
        (
            "bolt router (368 experts)",
            Dense(FloatType::BF16),
            368,
            4096,
            false,
        ),
        (
            "bolt latent down",
            Dense(FloatType::BF16),
            1024,
            4096,
            false,
        ),
        ("bolt latent up", Dense(FloatType::BF16), 4096, 1024, false),
        ("smollm2 qkv", Gguf(GgmlType::Q4_1), 960, 576, true),
        ("smollm2 gate_up", Gguf(GgmlType::Q4_1), 3072, 576, true),
        ("smollm2 down", Gguf(GgmlType::Q4_1), 576, 1536, true),
        ("smollm2 head", Gguf(GgmlType::Q8_0), 49152, 576, true),
    ];
    if !quick {
        v.extend([
            ("lightning head", Mlx(4), 131072, 2688, false),
            ("q8_0 4096x4096", Gguf(GgmlType::Q8_0), 4096, 4096, true),
            ("q4_k 4096x4096", Gguf(GgmlType::Q4K), 4096, 4096, false),
            ("q6_k 4096x4096", Gguf(GgmlType::Q6K), 4096, 4096, false),
            ("mlx8 4096x4096", Mlx(8), 4096, 4096, false),
            ("mlx3 4096x4096", Mlx(3), 4096, 4096, false),
            ("bf16 4096x4096", Dense(FloatType::BF16), 4096, 4096, true),
            ("f32 2048x2048", Dense(FloatType::F32), 2048, 2048, true),
        ]);
    }
    v
}

/// One row of the table: the matrix, its bytes, rows per call, µs, GB/s, fraction of `peak`.
#[allow(clippy::too_many_arguments)]
fn table_row(
    name: &str,
    format: GpuFormat,
    rows: usize,
    cols: usize,
    bytes: usize,
    n: usize,
    us: f64,
    peak: f64,
) -> String {
    let gbs = bytes as f64 / (us * 1e-6) / 1e9;
    format!(
        "| {name} | {format:?} | {rows} x {cols} | {:.1} | {n} | {us:.1} | {gbs:.0} | {:.0}% |",
        bytes as f64 / 1e6,
        100.0 * gbs * 1e9 / peak
    )
}

/// The largest |gpu - cpu| and the largest |cpu|.
fn largest_difference(gpu: &[f32], cpu: &[f32]) -> (f32, f32) {
    let d = gpu
        .iter()
        .zip(cpu)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    (d, cpu.iter().map(|v| v.abs()).fold(0f32, f32::max))
}

fn bits_equal(a: &[f32], b: &[f32]) -> usize {
    a.iter()
        .zip(b)
        .filter(|(x, y)| x.to_bits() != y.to_bits())
        .count()
}

/// The tensor cores' product on the same weights in its tiles (`ws`: the copies): the largest
/// difference from the CPU at 37 rows, one row's bits against its place among 37 with each
/// choice, then times at 1, 4, 16 and 64 rows with each that fits. False on a mismatch.
#[allow(clippy::too_many_arguments)]
fn bench_mma(
    gpu: &Gpu,
    pool: &Pool,
    packed: &PackedMatrix,
    ws: &[GpuMatrix],
    x: &cudarc::driver::CudaSlice<f32>,
    x_host: &[f32],
    label: &str,
    iters: usize,
    peak: f64,
) -> Res<bool> {
    let (rows, cols) = (ws[0].rows(), ws[0].cols());
    let tiles = ws
        .iter()
        .map(|m| mma::tile(gpu, m))
        .collect::<Result<Vec<_>, _>>()?;
    let bytes = tiles[0].storage_bytes();
    let mut y = gpu.zeros::<f32>(64 * rows)?;
    let mut ok = true;
    let mut c = vec![0f32; 37 * rows];
    cpu_matmul(packed, &x_host[..37 * cols], 37, &mut c, pool)?;
    mma::matmul(gpu, &tiles[0], x, 37, &mut y)?;
    let all = gpu.download(&y, 37 * rows)?;
    let (d, m) = largest_difference(&all, &c);
    println!("mma {label} n=37: max |GPU - CPU| {d:.3e} (max |y| {m:.3e})");
    for c in Choice::ALL {
        mma::matmul_with(gpu, c.kernel(), c, &tiles[0], x, 1, &mut y)?;
        let one = gpu.download(&y, rows)?;
        let bad = bits_equal(&one, &all[..rows]);
        if bad != 0 {
            println!(
                "CHECK mma {label} {c:?}: row 0 alone differs from its place among 37 ({bad})"
            );
            ok = false;
        }
    }
    // x split once: row 0 alone against its place among 37, one and two tiles a block.
    let mut sx = mma::SplitX::new(gpu, 64, cols)?;
    for rt in [1, 2] {
        mma::split(gpu, x, 1, &mut sx)?;
        mma::matmul_split_with(gpu, rt, &tiles[0], &sx, 1, &mut y)?;
        let bad = bits_equal(&gpu.download(&y, rows)?, &all[..rows]);
        if bad != 0 {
            println!("CHECK mma {label} split r{rt}: row 0 alone differs from its place among 37 ({bad})");
            ok = false;
        }
    }
    for n in [1usize, 4, 16, 64] {
        let us = time_us::<Error>(gpu.stream(), iters, |_| Ok(mma::split(gpu, x, n, &mut sx)?))?;
        let name = format!("{label} (tf_mma_split alone)");
        println!(
            "{}",
            table_row(&name, GpuFormat::Mlx4, n, cols, 4 * n * cols, n, us, peak)
        );
        for rt in [1, 2] {
            let k = mma::split_kernel(rt, n);
            let us = time_us::<Error>(gpu.stream(), iters, |i| {
                let m = &tiles[i % tiles.len()];
                Ok(mma::matmul_split_with(gpu, rt, m, &sx, n, &mut y)?)
            })?;
            let regs = gpu.registers(k)?;
            let name = format!("{label} ({k}, {regs} regs)");
            println!(
                "{}",
                table_row(&name, GpuFormat::Mlx4, rows, cols, bytes, n, us, peak)
            );
        }
        // The one-tile product's loads alone (compact tiles).
        if n == 1 && tiles[0].layout() == tf_cuda::weights::Layout::MmaTilesB16 {
            for (probe, p) in mma::LOADS_PROBES.iter().enumerate() {
                let us = time_us::<Error>(gpu.stream(), iters, |i| {
                    let m = &tiles[i % tiles.len()];
                    Ok(mma::loads_probe(gpu, m, probe, &sx, &mut y)?)
                })?;
                let name = format!("{label} ({p}, {} regs)", gpu.registers(p)?);
                println!(
                    "{}",
                    table_row(&name, GpuFormat::Mlx4, rows, cols, bytes, n, us, peak)
                );
            }
            // The same bytes read plainly, with 1 to 16 loads a thread in flight.
            let mut out = gpu.zeros::<u32>(tiles[0].storage_bytes().div_ceil(16 * 256))?;
            for (probe, (depth, k)) in mma::STREAM_PROBES.iter().enumerate() {
                let us = time_us::<Error>(gpu.stream(), iters, |i| {
                    Ok(mma::stream_probe(
                        gpu,
                        &tiles[i % tiles.len()],
                        probe,
                        &mut out,
                    )?)
                })?;
                let name = format!("{label} ({k}: a plain read, {depth} a thread)");
                println!(
                    "{}",
                    table_row(&name, GpuFormat::Mlx4, rows, cols, bytes, n, us, peak)
                );
            }
            // The tiles' codes alone, as the one-tile product reads them: two blocks an SM (80 KB
            // of shared memory each, as the product's registers allow), and two loads a warp in
            // flight with as many blocks as fit (none).
            let mut out = gpu.zeros::<u32>(rows.div_ceil(16))?;
            let two = 80u32 << 10;
            for (probe, smem) in [(0, two), (1, two), (1, 0), (2, two), (3, two)] {
                let us = time_us::<Error>(gpu.stream(), iters, |i| {
                    let m = &tiles[i % tiles.len()];
                    Ok(mma::tiles_probe(gpu, m, probe, smem, &mut out)?)
                })?;
                let k = mma::TILE_PROBES[probe];
                let name = format!("{label} ({k}, {} KB shared)", smem >> 10);
                println!(
                    "{}",
                    table_row(&name, GpuFormat::Mlx4, rows, cols, bytes, n, us, peak)
                );
            }
        }
        for c in Choice::ALL.into_iter().filter(|c| c.fits(n, cols)) {
            let k = c.kernel();
            let us = time_us::<Error>(gpu.stream(), iters, |i| {
                let m = &tiles[i % tiles.len()];
                Ok(mma::matmul_with(gpu, k, c, m, x, n, &mut y)?)
            })?;
            let regs = gpu.registers(k)?;
            let name = format!("{label} ({k}, {regs} regs)");
            println!(
                "{}",
                table_row(&name, GpuFormat::Mlx4, rows, cols, bytes, n, us, peak)
            );
        }
    }
    Ok(ok)
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => {
            println!("mmbench: PASS");
            ExitCode::SUCCESS
        }
        Ok(false) => {
            println!("mmbench: FAIL");
            ExitCode::FAILURE
        }
        Err(e) => {
            println!("mmbench: FAIL ({e})");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Res<bool> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| args.windows(2).find(|w| w[0] == flag).map(|w| w[1].clone());
    let iters: usize = value("--iters").and_then(|v| v.parse().ok()).unwrap_or(200);
    let peak: f64 = value("--peak")
        .and_then(|v| v.parse().ok())
        .unwrap_or(3.97e12);
    let quick = args.iter().any(|a| a == "--quick");
    let only = value("--only").unwrap_or_default();
    let hot = args.iter().any(|a| a == "--hot");
    let gpu = Gpu::open(0)?;
    let pool = Pool::new(std::thread::available_parallelism().map_or(1, |n| n.get()));
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let mut ok = true;
    println!("| matrix | format | rows x cols | MB | n | us/call | GB/s | of peak |");
    println!("|---|---|---|---|---|---|---|---|");
    for (label, layout, rows, cols, fused) in shapes(quick) {
        if !label.contains(only.as_str()) {
            continue;
        }
        let host = HostMatrix::random(layout, rows, cols, &mut rng);
        let packed = host.packed()?;
        let w = GpuMatrix::upload(&gpu, &packed)?;
        let bytes = w.storage_bytes();
        // Check: GPU vs CPU bits at 1, 5 and 37 rows; fused vs plain (37: the tiled product).
        let nmax = 64;
        let x_host: Vec<f32> = (0..nmax * cols).map(|_| rng.unit()).collect();
        let x = gpu.upload(&x_host)?;
        let mut y = gpu.zeros::<f32>(nmax * rows)?;
        // The matmul of a tf_slices format gives that order's bits (its host reference), the
        // rest the CPU's; the fused kernels give the CPU's.
        let slices = slices::kernel(w.format(), cols);
        let dev = device_bytes(&packed)?;
        let ns: &[usize] = if slices.is_some() {
            &[1, 5]
        } else {
            &[1, 5, 37]
        };
        for &n in ns {
            ops::matmul(&gpu, &w, &x, n, &mut y)?;
            let g = gpu.download(&y, n * rows)?;
            let mut c = vec![0f32; n * rows];
            cpu_matmul(&packed, &x_host[..n * cols], n, &mut c, &pool)?;
            let (want, of) = match slices {
                Some(_) => {
                    let r = slices::reference(w.format(), &dev, rows, cols, &x_host, n);
                    (r, "the tf_slices reference")
                }
                None => (c.clone(), "the CPU"),
            };
            let bad = bits_equal(&g, &want);
            if bad != 0 {
                println!(
                    "CHECK {label} n={n}: {bad} of {} outputs differ from {of}",
                    c.len()
                );
                ok = false;
            }
            if slices.is_some() {
                let (d, m) = largest_difference(&g, &c);
                println!("tf_slices {label} n={n}: max |GPU - CPU| {d:.3e} (max |y| {m:.3e})");
            }
            if fused {
                let mut yf = gpu.zeros::<f32>(nmax * rows)?;
                matmul_fused(&gpu, &w, &x, cols, XForm::None, Epilogue::Store, n, &mut yf)?;
                let f = gpu.download(&yf, n * rows)?;
                let bad = bits_equal(&f, &c);
                if bad != 0 {
                    println!("CHECK {label} fused n={n}: {bad} outputs differ from the CPU");
                    ok = false;
                }
            }
        }
        // Planted control: the row-variant kernel must be caught (Q4_1 shapes only).
        if matches!(layout, Layout::Gguf(GgmlType::Q4_1)) {
            ops::matmul_with(&gpu, "tf_plant_matmul_q4_1_rowvar", &w, &x, 5, &mut y)?;
            let g = gpu.download(&y, 5 * rows)?;
            let mut c = vec![0f32; 5 * rows];
            cpu_matmul(&packed, &x_host[..5 * cols], 5, &mut c, &pool)?;
            if bits_equal(&g, &c) == 0 {
                println!("CHECK {label}: the planted row-variant kernel went uncaught");
                ok = false;
            }
        }
        // Timing over copies that together exceed L2 several times (one with --hot).
        let copies = if hot {
            1
        } else {
            (512usize << 20).div_ceil(bytes).clamp(1, 64)
        };
        let mut ws = vec![w];
        for _ in 1..copies {
            ws.push(GpuMatrix::upload(&gpu, &packed)?);
        }
        // Both geometries where the format has tf_mmq (4 threads a row), checked and timed.
        let tprs: &[usize] = if ws[0].format().has_mmq() {
            &[16, 4]
        } else {
            &[16]
        };
        let kernel = ws[0].format().matmul_kernel();
        for &tpr in tprs {
            ops::matmul_geometry(&gpu, kernel, &ws[0], &x, 5, &mut y, tpr)?;
            let g = gpu.download(&y, 5 * rows)?;
            let mut c = vec![0f32; 5 * rows];
            cpu_matmul(&packed, &x_host[..5 * cols], 5, &mut c, &pool)?;
            let bad = bits_equal(&g, &c);
            if bad != 0 {
                println!("CHECK {label} {tpr} threads a row: {bad} outputs differ from the CPU");
                ok = false;
            }
        }
        for (n, &tpr) in [1usize, 4, 16]
            .into_iter()
            .flat_map(|n| tprs.iter().map(move |t| (n, t)))
        {
            for m in ws.iter().take(3) {
                ops::matmul_geometry(&gpu, kernel, m, &x, n, &mut y, tpr)?;
            }
            let us = time_us::<Error>(gpu.stream(), iters, |i| {
                Ok(ops::matmul_geometry(
                    &gpu,
                    kernel,
                    &ws[i % copies],
                    &x,
                    n,
                    &mut y,
                    tpr,
                )?)
            })?;
            let regs = gpu.registers(&geometry_kernel(kernel, tpr))?;
            let name = format!("{label} ({tpr} thr/row, {regs} regs)");
            println!(
                "{}",
                table_row(&name, ws[0].format(), rows, cols, bytes, n, us, peak)
            );
        }
        if let Some(k) = slices {
            // One row (the launcher's row groups a warp), 4 and 16 rows.
            let per = slices::groups_per_warp(&gpu, k, &ws[0])?;
            for (n, per) in [(1usize, per), (4, 0), (16, 0)] {
                for m in ws.iter().take(3) {
                    slices::matmul_geometry(&gpu, k, m, &x, n, &mut y, per)?;
                }
                let us = time_us::<Error>(gpu.stream(), iters, |i| {
                    let m = &ws[i % copies];
                    Ok(slices::matmul_geometry(&gpu, k, m, &x, n, &mut y, per)?)
                })?;
                let entry = if n == 1 {
                    format!("{k}_one")
                } else {
                    k.to_string()
                };
                let regs = gpu.registers(&entry)?;
                let name = if n == 1 {
                    format!("{label} ({entry}, {per} groups a warp, {regs} regs)")
                } else {
                    format!("{label} ({entry}, {regs} regs)")
                };
                println!(
                    "{}",
                    table_row(&name, ws[0].format(), rows, cols, bytes, n, us, peak)
                );
            }
        }
        if ws[0].format() == GpuFormat::Mlx4 && mma::serves(64, cols) {
            ok &= bench_mma(&gpu, &pool, &packed, &ws, &x, &x_host, label, iters, peak)?;
        }
        if fused {
            // The fused kernel at 1 row, SwiGLU in and residual add (the down projection's use).
            let xs = gpu.upload(&(0..2 * cols).map(|_| rng.unit()).collect::<Vec<f32>>())?;
            let us = time_us::<Error>(gpu.stream(), iters, |i| {
                let (xf, ep) = (XForm::SiluMul, Epilogue::Add);
                Ok(matmul_fused(
                    &gpu,
                    &ws[i % copies],
                    &xs,
                    2 * cols,
                    xf,
                    ep,
                    1,
                    &mut y,
                )?)
            })?;
            let name = format!("{label} (fused silu/add)");
            println!(
                "{}",
                table_row(&name, ws[0].format(), rows, cols, bytes, 1, us, peak)
            );
            // The fused kernel (norm, store) and its tiled twin at each row count.
            let gain = gpu.upload(&vec![1.0f32; cols])?;
            let norm = XForm::Norm {
                gain: &gain,
                eps: 1e-5,
            };
            for n in [1usize, 2, 4, 8, 16, 32, 64] {
                for (kernel, from) in [("mmf", usize::MAX), ("mmg", 1)] {
                    let _tiled = TiledFromRows::new(from);
                    let ep = Epilogue::Store;
                    let us = time_us::<Error>(gpu.stream(), iters, |i| {
                        Ok(matmul_fused(
                            &gpu,
                            &ws[i % copies],
                            &x,
                            cols,
                            norm,
                            ep,
                            n,
                            &mut y,
                        )?)
                    })?;
                    let name = format!("{label} (fused norm/store, {kernel})");
                    println!(
                        "{}",
                        table_row(&name, ws[0].format(), rows, cols, bytes, n, us, peak)
                    );
                }
            }
        }
    }
    Ok(ok)
}
