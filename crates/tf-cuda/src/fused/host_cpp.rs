//! kernels/matmul.cu, fused.cu and moe.cu compiled for the host with a C++ compiler (no GPU) and
//! run under a small SIMT emulation (one OS thread per CUDA thread, barriers for
//! `__syncthreads`, `__syncwarp` and the warp shuffles): the staged matmul (`tf_mmv`, behind the
//! `tf_matmul_<fmt>` entries), the grouped expert matmul and the column-tiled fused kernels must
//! give the CPU kernels' bits for every format, with rows whose bytes are not 16-byte aligned, a
//! matrix at an odd address and row counts across tiles; the planted controls must differ.
//! Skipped, with a message, when no C++ compiler is found (`$CXX`, else `c++`);
//! `TF_CUDA_REQUIRE_CXX=1` makes that a failure.

use crate::device::{fused_kernel_name, mmg_kernel_name, FUSED_VARIANTS, MMG_FORMATS};
use crate::weights::{device_bytes, GpuFormat};
use tf_kernels::contract::Rng;
use tf_kernels::matmul::{matmul as cpu_matmul, FloatType};
use tf_kernels::pool::Pool;

// The suite's random packed weights (its module is private to the suite; this is the same file:
// making `suite::packed` pub(crate) would let this be a `use`).
#[allow(dead_code, clippy::duplicate_mod)]
#[path = "../suite/packed.rs"]
mod packed;
use packed::HostWeights;

mod harness;
mod rope;
use harness::{host_source, FORMATS};

/// One emulated launch and the bits it must (or, for a planted control, must not) give; the
/// fields a kind does not use stay at their defaults (empty, zero).
#[derive(Default)]
struct Case {
    label: String,
    name: String,
    kind: i32,
    /// Threads the launch gives a weight row (kinds 0 and 1).
    tpr: usize,
    rows: usize,
    cols: usize,
    n: usize,
    experts: usize,
    x_stride: usize,
    bytes: Vec<u8>,
    /// Bytes of garbage before the matrix (an odd offset puts its rows off 16-byte alignment).
    off: usize,
    offsets: Vec<i32>,
    x: Vec<f32>,
    gain: Vec<f32>,
    eps: f32,
    y0: Vec<f32>,
    smem: usize,
    want: Vec<f32>,
    must_match: bool,
}

impl Case {
    fn write(&self, out: &mut Vec<u8>) {
        let put = |out: &mut Vec<u8>, v: i32| out.extend_from_slice(&v.to_le_bytes());
        put(out, self.name.len() as i32);
        out.extend_from_slice(self.name.as_bytes());
        for v in [
            self.kind,
            self.tpr as i32,
            self.rows as i32,
            self.cols as i32,
            self.n as i32,
            self.experts as i32,
            self.x_stride as i32,
            self.bytes.len() as i32,
            self.off as i32,
        ] {
            put(out, v);
        }
        out.extend_from_slice(&self.bytes);
        self.offsets.iter().for_each(|&v| put(out, v));
        let floats = |out: &mut Vec<u8>, v: &[f32]| {
            v.iter()
                .for_each(|f| out.extend_from_slice(&f.to_le_bytes()))
        };
        floats(out, &self.x);
        if matches!(self.kind, 2 | 3) {
            floats(out, &self.gain);
            floats(out, &[self.eps]);
            floats(out, &self.y0);
            put(out, self.smem as i32);
        }
    }

    /// A plain matmul launch of `name` (kind 0) on `w` (its device `bytes` placed `off` bytes
    /// into the buffer) with `tpr` threads a row, wanting the CPU's bits (or, planted, not).
    #[allow(clippy::too_many_arguments)]
    fn plain(
        label: String,
        name: String,
        tpr: usize,
        w: &HostWeights,
        bytes: Vec<u8>,
        off: usize,
        x: Vec<f32>,
        n: usize,
        must_match: bool,
        pool: &Pool,
    ) -> Case {
        Case {
            label,
            name,
            kind: 0,
            tpr,
            rows: w.rows,
            cols: w.cols,
            n,
            x_stride: w.cols,
            bytes,
            off,
            want: cpu(w, &x, n, pool),
            x,
            must_match,
            ..Default::default()
        }
    }

    /// A grouped expert matmul launch of `name` (kind 1): `experts` stacked matrices of `rows`
    /// rows in `bytes`, their groups of the `n` rows of `x` from `offsets`.
    #[allow(clippy::too_many_arguments)]
    fn grouped(
        label: String,
        name: String,
        tpr: usize,
        (rows, cols, n, experts): (usize, usize, usize, usize),
        bytes: Vec<u8>,
        offsets: Vec<i32>,
        x: Vec<f32>,
        want: Vec<f32>,
        must_match: bool,
    ) -> Case {
        Case {
            label,
            name,
            kind: 1,
            tpr,
            rows,
            cols,
            n,
            experts,
            x_stride: cols,
            bytes,
            offsets,
            want,
            x,
            must_match,
            ..Default::default()
        }
    }

    /// Output floats the harness writes.
    fn out_len(&self) -> usize {
        self.n * self.rows
    }
}

/// Random MLX weights: group 64, f32 scales for 4 bits (so s * q rounds), f16 otherwise.
fn mlx(bits: u8, rows: usize, cols: usize, rng: &mut Rng) -> HostWeights {
    let ty = if bits == 4 {
        FloatType::F32
    } else {
        FloatType::F16
    };
    HostWeights::random_mlx(bits, 64, ty, rows, cols, rng)
}

/// Random weights of `format` and their device bytes.
fn weights(format: GpuFormat, rows: usize, cols: usize, rng: &mut Rng) -> (HostWeights, Vec<u8>) {
    let w = match format {
        GpuFormat::Mlx2 => mlx(2, rows, cols, rng),
        GpuFormat::Mlx3 => mlx(3, rows, cols, rng),
        GpuFormat::Mlx4 => mlx(4, rows, cols, rng),
        GpuFormat::Mlx5 => mlx(5, rows, cols, rng),
        GpuFormat::Mlx6 => mlx(6, rows, cols, rng),
        GpuFormat::Mlx8 => mlx(8, rows, cols, rng),
        f => HostWeights::random(f, rows, cols, rng),
    };
    let dev = device_bytes(&w.packed())
        .expect("device bytes")
        .into_owned();
    (w, dev)
}

fn cpu(w: &HostWeights, x: &[f32], n: usize, pool: &Pool) -> Vec<f32> {
    let mut y = vec![0f32; n * w.rows];
    cpu_matmul(&w.packed(), x, n, &mut y, pool).expect("cpu matmul");
    y
}

/// Columns per format: several staged chunks, a partial last one, and rows whose byte length is
/// not a multiple of 16 where the format allows.
fn cols_of(f: GpuFormat) -> usize {
    match f {
        GpuFormat::F32 => 1000,
        GpuFormat::F16 | GpuFormat::Bf16 => 1000,
        GpuFormat::Q4K | GpuFormat::Q6K => 2304,
        _ => 3648,
    }
}

fn plain_cases(rng: &mut Rng, pool: &Pool) -> Vec<Case> {
    let mut cases = Vec::new();
    for (i, f) in FORMATS.iter().copied().enumerate() {
        let (rows, cols) = (11, cols_of(f));
        let (w, bytes) = weights(f, rows, cols, rng);
        // Both geometries where the format has tf_mmq (4 threads a row) beside tf_mmv (16).
        let tprs = if f.has_mmq() { vec![16, 4] } else { vec![16] };
        for (n, off, tpr) in [(1usize, 0usize), (7, 2 + 4 * (i % 3))]
            .into_iter()
            .flat_map(|(n, off)| tprs.iter().map(move |&t| (n, off, t)))
        {
            let x = rng.vec_uniform(n * cols, -1.0, 1.0);
            cases.push(Case::plain(
                format!("{f:?} matmul n={n} off={off} tpr={tpr}"),
                format!("tf_matmul_{}", f.kernel_tag()),
                tpr,
                &w,
                bytes.clone(),
                off,
                x,
                n,
                true,
                pool,
            ));
        }
    }
    // The old template through reference entries (the host build adds them) and the planted
    // controls: a reversed chain order when n > 1, a wrong nibble, a fused multiply-add.
    for (f, name, must_match, ty) in [
        (GpuFormat::Q4_0, "tf_ref_matmul_q4_0", true, None),
        (GpuFormat::Mlx4, "tf_ref_matmul_mlx4", true, None),
        (GpuFormat::Q4_1, "tf_plant_matmul_q4_1_rowvar", false, None),
        (GpuFormat::Mlx4, "tf_plant_matmul_mlx4_nibbles", false, None),
        (
            GpuFormat::Mlx4,
            "tf_plant_matmul_mlx4_fma",
            false,
            Some(FloatType::F32),
        ),
    ] {
        let (rows, cols, n) = (9, 1024, 5);
        let (w, bytes) = match ty {
            Some(t) => {
                let w = HostWeights::random_mlx(4, 64, t, rows, cols, rng);
                let d = device_bytes(&w.packed())
                    .expect("device bytes")
                    .into_owned();
                (w, d)
            }
            None => weights(f, rows, cols, rng),
        };
        let x = rng.vec_uniform(n * cols, -1.0, 1.0);
        // The reference entries run tf_matmul: 16 threads a row.
        let tpr = if name.starts_with("tf_ref_") {
            16
        } else {
            f.matmul_threads_per_row(usize::MAX, 1)
        };
        let (label, name) = (name.to_string(), name.to_string());
        cases.push(Case::plain(
            label, name, tpr, &w, bytes, 0, x, n, must_match, pool,
        ));
    }
    // MLX 4/8-bit scales at the edges of tf_mmq's one-rounding s * q (fmaf(s, 2^23 + q,
    // -s 2^23)): huge (the s * q path), subnormal, and ordinary, on both geometries, at one
    // activation row (the decode loops) and three.
    for (bits, tpr, n) in [
        (4u8, 4usize, 3usize),
        (4, 16, 3),
        (8, 4, 3),
        (4, 4, 1),
        (4, 16, 1),
    ] {
        let (rows, cols) = (9, 3648);
        let mut w = HostWeights::random_mlx(bits, 64, FloatType::F32, rows, cols, rng);
        if let Some(p) = w.mlx.as_mut() {
            for (g, s) in p.scales.chunks_exact_mut(4).enumerate() {
                let v = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
                // One huge scale (row 0; s * 2^23 overflows), the rest ordinary, a quarter of
                // them subnormal.
                let v = match g {
                    30 => -1.5 * 2f32.powi(116),
                    _ if g % 4 == 1 => v * 2f32.powi(-132),
                    _ => v,
                };
                s.copy_from_slice(&v.to_le_bytes());
            }
        }
        let bytes = device_bytes(&w.packed())
            .expect("device bytes")
            .into_owned();
        let x = rng.vec_uniform(n * cols, -1.0, 1.0);
        let name = format!("tf_matmul_mlx{bits}");
        let label = format!("{name} huge and subnormal scales, n={n} tpr={tpr}");
        cases.push(Case::plain(
            label, name, tpr, &w, bytes, 0, x, n, true, pool,
        ));
    }
    cases
}

/// `tf_slices` (the GPU's own order): the host reference's bits at 1, 3 and 6 activation rows
/// (tiles of 4 and 2) and through the one-row entries (1 and 3 row groups a warp: a warp's
/// loads running on into its next group), an odd row count (the warp's second row clamped),
/// rows with more units than lanes and with fewer, huge and subnormal MLX scales; its planted
/// controls must differ.
fn slices_cases(rng: &mut Rng) -> Vec<Case> {
    let mut cases = Vec::new();
    // `per` > 0: the one-row entry NAME_one with `per` row groups a warp (n = 1).
    let mut add =
        |name: &str, per: usize, w: &HostWeights, bytes: &[u8], n, rng: &mut Rng, must_match| {
            let x = rng.vec_uniform(n * w.cols, -1.0, 1.0);
            let f = if w.mlx.is_some() {
                GpuFormat::Mlx4
            } else {
                GpuFormat::Bf16
            };
            let want = crate::slices::reference(f, bytes, w.rows, w.cols, &x, n);
            let (name, kind, tpr) = match per {
                0 => (name.to_string(), 0, 16),
                _ => (format!("{name}_one"), 4, per),
            };
            cases.push(Case {
                label: format!("{name} {}x{} n={n} per={per}", w.rows, w.cols),
                name,
                kind,
                tpr,
                rows: w.rows,
                cols: w.cols,
                n,
                x_stride: w.cols,
                bytes: bytes.to_vec(),
                want,
                x,
                must_match,
                ..Default::default()
            });
        };
    for (cols, ty) in [
        (1184usize, FloatType::F32),
        (96, FloatType::BF16),
        (2240, FloatType::F16),
    ] {
        let mut w = HostWeights::random_mlx(4, 32, ty, 9, cols, rng);
        if let (Some(p), FloatType::F32) = (w.mlx.as_mut(), ty) {
            for (g, s) in p.scales.chunks_exact_mut(4).enumerate() {
                let v = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
                let v = match g % 7 {
                    3 => -1.5 * 2f32.powi(110),
                    5 => v * 2f32.powi(-132),
                    _ => v,
                };
                s.copy_from_slice(&v.to_le_bytes());
            }
        }
        let bytes = device_bytes(&w.packed())
            .expect("device bytes")
            .into_owned();
        for (n, per) in [(1usize, 1usize), (1, 3), (1, 0), (3, 0), (6, 0)] {
            add("tf_slices_mlx4", per, &w, &bytes, n, rng, true);
        }
    }
    let w = HostWeights::random_mlx(4, 32, FloatType::F32, 9, 1184, rng);
    let bytes = device_bytes(&w.packed())
        .expect("device bytes")
        .into_owned();
    for (name, n, per) in [
        (crate::slices::PLANT_ROW_VARIANT, 5, 0),
        (crate::slices::PLANT_LANE_SUM, 1, 0),
        (crate::slices::PLANT_LANE_SUM, 1, 2),
    ] {
        add(name, per, &w, &bytes, n, rng, false);
    }
    let (w, bytes) = weights(GpuFormat::Bf16, 5, 2080, rng);
    for (n, per) in [(1usize, 2usize), (5, 0)] {
        add("tf_slices_bf16", per, &w, &bytes, n, rng, true);
    }
    cases
}

/// Grouped expert matmuls: 3 experts of 9 rows stacked, one of them without rows.
fn moe_cases(rng: &mut Rng, pool: &Pool) -> Vec<Case> {
    let mut cases = Vec::new();
    let rows = 9usize;
    for (i, (f, name, must_match)) in [
        (GpuFormat::Q4_0, "tf_moe_matmul_q4_0", true),
        (GpuFormat::Mlx4, "tf_moe_matmul_mlx4", true),
        (GpuFormat::Q6K, "tf_moe_matmul_q6_k", true),
        (GpuFormat::F16, "tf_moe_matmul_f16", true),
        (GpuFormat::Q4_1, "tf_plant_moe_matmul_q4_1_rowvar", false),
    ]
    .into_iter()
    .enumerate()
    {
        // 3 experts with groups of 2, 0 and 5 rows; or 4 experts with 0, 1, 0 and 1 rows, so
        // the launch has fewer block rows (2) than experts and must skip the empty ones.
        let (e, n, offsets) = if i % 2 == 0 {
            (3usize, 7usize, vec![0i32, 2, 2, 7])
        } else {
            (4, 2, vec![0i32, 0, 1, 1, 2])
        };
        let cols = if f == GpuFormat::Q6K { 1280 } else { 1728 };
        let (w, bytes) = weights(f, e * rows, cols, rng);
        let x = rng.vec_uniform(n * cols, -1.0, 1.0);
        let all = cpu(&w, &x, n, pool);
        let mut want = vec![0f32; n * rows];
        for ex in 0..e {
            for p in offsets[ex] as usize..offsets[ex + 1] as usize {
                let src = &all[p * e * rows + ex * rows..][..rows];
                want[p * rows..][..rows].copy_from_slice(src);
            }
        }
        cases.push(Case::grouped(
            format!("{f:?} {name}"),
            name.to_string(),
            f.matmul_threads_per_row(usize::MAX, 1),
            (rows, cols, n, e),
            bytes,
            offsets,
            x,
            want,
            must_match,
        ));
    }
    cases.extend(moe_slices_cases(rng));
    cases
}

/// Grouped expert matmuls in the GPU's own order (`tf_moe_slices_*`): each group equals the
/// `tf_slices` reference of its expert's matrix and rows, through the many-row body (groups of
/// 2, 0 and 5 rows) and the one-row body (one-token rounds: groups of one row, experts skipped).
fn moe_slices_cases(rng: &mut Rng) -> Vec<Case> {
    let mut cases = Vec::new();
    let rows = 9usize;
    for f in [GpuFormat::Mlx4, GpuFormat::Bf16] {
        let tag = f.kernel_tag();
        for (one, offsets) in [(false, vec![0i32, 2, 2, 7]), (true, vec![0i32, 0, 1, 1, 2])] {
            let e = offsets.len() - 1;
            let n = offsets[e] as usize;
            let cols = 1216; // 38 units: lanes 0-5 take two
            let (_, bytes) = weights(f, e * rows, cols, rng);
            let x = rng.vec_uniform(n * cols, -1.0, 1.0);
            let mut want = vec![0f32; n * rows];
            let eb = bytes.len() / e;
            for ex in 0..e {
                let (a, b) = (offsets[ex] as usize, offsets[ex + 1] as usize);
                let we = &bytes[ex * eb..(ex + 1) * eb];
                let y = crate::slices::reference(f, we, rows, cols, &x[a * cols..b * cols], b - a);
                want[a * rows..b * rows].copy_from_slice(&y);
            }
            let name = format!("tf_moe_slices_{tag}{}", if one { "_one" } else { "" });
            // The launcher's warps: 4 (bf16: 2) rows a warp in the one-row body, else 2.
            let tpr = if one && f == GpuFormat::Mlx4 { 8 } else { 16 };
            let label = format!("{f:?} {name}");
            let shape = (rows, cols, n, e);
            cases.push(Case::grouped(
                label, name, tpr, shape, bytes, offsets, x, want, true,
            ));
        }
    }
    cases
}

/// A launch of a fused kernel (kind 2, `tf_mmf_*`) or its tiled twin (kind 3, `tf_mmg_*`).
struct Fused<'a> {
    kind: i32,
    label: String,
    name: String,
    xf: &'a str,
    ep: &'a str,
    n: usize,
    smem: usize,
    /// Added to the y the kernel starts from (a planted control when not 0).
    y0_shift: f32,
    /// Bytes of garbage before the matrix (rows off 16-byte alignment).
    off: usize,
    must_match: bool,
}

impl Fused<'_> {
    /// The case on `w` (its device `bytes`): fresh input rows (4 floats of padding apart), gain
    /// and starting y, wanting the CPU's rms_norm / silu_mul, matmul, then add or silu_mul.
    fn case(self, w: &HostWeights, bytes: &[u8], rng: &mut Rng, pool: &Pool) -> Case {
        use tf_kernels::ops::{rms_norm, silu_mul, silu_mul_fused};
        let (rows, cols, n, eps) = (w.rows, w.cols, self.n, 1e-5f32);
        let x_stride = if self.xf == "silu" { 2 * cols } else { cols } + 4;
        let x = rng.vec_uniform(n * x_stride, -1.5, 1.5);
        let gain = rng.vec_uniform(cols, 0.5, 1.5);
        let rows_in = |off: usize| -> Vec<f32> {
            (0..n)
                .flat_map(|r| x[r * x_stride + off..][..cols].to_vec())
                .collect()
        };
        let mut t = vec![0f32; n * cols];
        match self.xf {
            "none" => t = rows_in(0),
            "norm" => rms_norm(&rows_in(0), &gain, eps, n, &mut t).expect("cpu rms_norm"),
            _ => silu_mul(&rows_in(0), &rows_in(cols), &mut t).expect("cpu silu_mul"),
        }
        let s = cpu(w, &t, n, pool);
        let y0 = rng.vec_uniform(n * rows, -1.0, 1.0);
        let want: Vec<f32> = match self.ep {
            "add" => y0.iter().zip(&s).map(|(a, b)| a + b).collect(),
            "swiglu" => {
                let mut o = y0.clone();
                silu_mul_fused(&s, rows / 2, n, &mut o[..n * rows / 2]).expect("cpu swiglu");
                o
            }
            _ => s,
        };
        Case {
            label: self.label,
            name: self.name,
            kind: self.kind,
            tpr: 16,
            rows,
            cols,
            n,
            x_stride,
            bytes: bytes.to_vec(),
            off: self.off,
            x,
            gain,
            eps,
            y0: y0.iter().map(|v| v + self.y0_shift).collect(),
            smem: self.smem,
            want,
            must_match: self.must_match,
            ..Default::default()
        }
    }
}

/// The fused kernels over several column chunks: each transform and epilogue against the CPU's
/// rms_norm / silu_mul, matmul and add; a planted control starts the add from the wrong y.
fn fused_cases(rng: &mut Rng, pool: &Pool) -> Vec<Case> {
    let mut cases = Vec::new();
    for (i, f) in FORMATS.iter().copied().enumerate() {
        let (rows, n) = (10usize, if i % 2 == 0 { 3 } else { 6 });
        let cols = match f {
            // Odd formats also take rows of one chunk or less.
            GpuFormat::F32 | GpuFormat::F16 | GpuFormat::Bf16 if i % 2 == 1 => 200,
            GpuFormat::F32 | GpuFormat::F16 | GpuFormat::Bf16 => 2100,
            GpuFormat::Q4K | GpuFormat::Q6K => 2304,
            _ if i % 2 == 1 => 576,
            _ => 2112,
        };
        let (w, bytes) = weights(f, rows, cols, rng);
        for (xf, ep) in [
            ("none", "store"),
            ("norm", "add"),
            ("silu", "add"),
            ("norm", "store"),
        ] {
            if !(i % 3 == 0 || (xf, ep) != ("norm", "store")) {
                continue;
            }
            let plant = i == 4 && ep == "add";
            let spec = Fused {
                kind: 2,
                label: format!(
                    "{f:?} fused {xf} {ep}{}",
                    if plant { " (planted)" } else { "" }
                ),
                name: fused_kernel_name(f.kernel_tag(), xf, ep),
                xf,
                ep,
                n,
                smem: super::fused_smem_bytes_for(f, cols),
                y0_shift: if plant { 0.25 } else { 0.0 },
                off: 0,
                must_match: !plant,
            };
            cases.push(spec.case(&w, &bytes, rng, pool));
        }
    }
    cases
}

/// The many-row twins (kind 3) over two blocks of activation rows and of weight rows, each
/// transform and epilogue against the CPU's; the planted control walks the chunks backwards.
fn mmg_cases(rng: &mut Rng, pool: &Pool) -> Vec<Case> {
    let mut cases = Vec::new();
    let formats = FORMATS
        .iter()
        .copied()
        .filter(|f| MMG_FORMATS.contains(&f.kernel_tag()));
    for (i, f) in formats.enumerate() {
        // Floats end in a partial chunk; the quantized rows span several chunks.
        let cols = match f {
            GpuFormat::F32 | GpuFormat::F16 | GpuFormat::Bf16 => 200,
            _ if i % 2 == 1 => 576,
            _ => 1088,
        };
        let (w, bytes) = weights(f, 40, cols, rng);
        let mut variants: Vec<(&str, &str, bool)> =
            FUSED_VARIANTS.iter().map(|&(x, e)| (x, e, false)).collect();
        if f == GpuFormat::Q4_1 {
            variants.push(("none", "store", true));
        }
        for (xf, ep, plant) in variants {
            let name = if plant {
                "tf_plant_mmg_q4_1_none_store".to_string()
            } else {
                mmg_kernel_name(f.kernel_tag(), xf, ep)
            };
            let spec = Fused {
                kind: 3,
                label: format!("{f:?} {name}"),
                name,
                xf,
                ep,
                n: 37,
                smem: 0,
                y0_shift: 0.0,
                off: 4 * (i % 4),
                must_match: !plant,
            };
            cases.push(spec.case(&w, &bytes, rng, pool));
        }
    }
    cases
}

#[test]
fn staged_and_fused_matmuls_compiled_for_the_host_give_the_cpu_bits() {
    let Some(cxx) = crate::host_cxx::compiler() else {
        return;
    };
    let (dir, exe) = crate::host_cxx::build(&cxx, "mmv", &host_source());
    let pool = Pool::new(1);
    let mut rng = Rng::new(0x3317);
    let mut cases = plain_cases(&mut rng, &pool);
    cases.extend(moe_cases(&mut rng, &pool));
    cases.extend(fused_cases(&mut rng, &pool));
    cases.extend(mmg_cases(&mut rng, &pool));
    cases.extend(slices_cases(&mut rng));
    let mut data = Vec::new();
    cases.iter().for_each(|c| c.write(&mut data));
    let out = crate::host_cxx::run(&dir, &exe, "cases", &data);
    let _ = std::fs::remove_dir_all(&dir);
    let floats: Vec<u32> = out
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert_eq!(
        floats.len(),
        cases.iter().map(Case::out_len).sum::<usize>(),
        "output length"
    );
    let mut at = 0;
    let mut failures = Vec::new();
    for c in &cases {
        let got = &floats[at..at + c.out_len()];
        at += c.out_len();
        let bad = got
            .iter()
            .zip(&c.want)
            .filter(|(g, w)| **g != w.to_bits())
            .count();
        if c.must_match && bad != 0 {
            failures.push(format!(
                "{}: {bad} of {} outputs differ",
                c.label,
                c.want.len()
            ));
        }
        if !c.must_match && bad == 0 {
            failures.push(format!("{}: the planted control went uncaught", c.label));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
