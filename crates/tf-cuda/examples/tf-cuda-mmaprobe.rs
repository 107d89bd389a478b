//! `tf-cuda-mmaprobe [--iters N] [--peak BYTES_PER_S] [--only TEXT]`: the tensor-core probe
//! (`tf_cuda::probe`, kernels/probe/mma_mlx4.cu: MLX 4-bit products of 1 to 8 rows by
//! mma.sync) on the GPU, compiled alone by NVRTC (the program's kernels are not needed).
//!
//! 1. Check, at 48 x 256, 160 x 1024 and 4096 x 4096, every variant: the largest error relative
//!    to the float64 reference (the sum of |terms| of the row) at 8 rows of x, within the
//!    bound; row 5 of x alone gives the bits of column 5 among the eight (so a row's result does
//!    not follow its column or the row count); a planted layout (the tiles' rows g and g + 8
//!    exchanged) must fail the bound.
//! 2. Time, at Bolt's MLX 4-bit shapes (`--only`: the shapes whose label contains TEXT), every
//!    variant at 1 and 8 rows: back-to-back launches between two events over enough copies of
//!    the weights that none is still in L2 when read again; µs a call, GB/s of the probe's
//!    weight bytes (0.625 a weight: codes and f32 scale and bias per 64) and the fraction of
//!    `--peak` (default 3.97e12 B/s); and the x split alone.
//!
//! Prints PASS/FAIL last; exits non-zero on any failed check or error. Compare with
//! `tf-cuda-mmbench --quick --only bolt` (the engine's `tf_slices`) in the same call.

use cudarc::driver::{CudaContext, CudaModule, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;
use std::process::ExitCode;
use std::sync::Arc;
use tf_cuda::compile::compile_to_ptx;
use tf_cuda::device::time_us;
use tf_cuda::probe::{max_rel_err, split_kernel, Mlx4, MmaVariant, GROUP, MMA_VARIANTS};
use tf_kernels::contract::Rng;

type Error = Box<dyn std::error::Error>;
type Res<T> = Result<T, Error>;

/// Bolt's MLX 4-bit matrices (rows, cols) at one token.
const SHAPES: [(&str, usize, usize); 5] = [
    ("mamba in_proj", 18560, 4096),
    ("mamba out", 4096, 8192),
    ("shared up", 5376, 4096),
    ("shared down", 4096, 5376),
    ("9 experts up", 24192, 1024),
];

/// The probe's module on one stream.
struct Probe {
    stream: Arc<CudaStream>,
    module: Arc<CudaModule>,
}

/// A packed matrix on the device.
struct DevMatrix {
    rows: usize,
    cols: usize,
    words: CudaSlice<u32>,
    sb: CudaSlice<f32>,
}

/// x split for the product: the parts as B fragments and the group sums.
struct DevX {
    nt: usize,
    xf: CudaSlice<u32>,
    xsum: CudaSlice<f32>,
}

impl Probe {
    fn open() -> Res<Probe> {
        if !tf_cuda::device::driver_present() {
            return Err(tf_cuda::CudaError::NoDriver.into());
        }
        let ctx = CudaContext::new(0)?;
        let (major, minor) = ctx.compute_capability()?;
        let arch = format!("compute_{major}{minor}");
        let ptx = compile_to_ptx("mma_mlx4.cu", tf_cuda::probe::MMA_MLX4_SOURCE, &arch)?;
        let module = ctx.load_module(Ptx::from_src(ptx))?;
        println!("device: {} ({arch})", ctx.name()?);
        Ok(Probe {
            stream: ctx.default_stream(),
            module,
        })
    }

    fn upload(&self, m: &Mlx4, planted: bool) -> Res<DevMatrix> {
        let (words, sb) = m.pack(planted);
        Ok(DevMatrix {
            rows: m.rows,
            cols: m.cols,
            words: self.stream.clone_htod(&words)?,
            sb: self.stream.clone_htod(&sb)?,
        })
    }

    /// Splits `x` (`nt` rows of `cols`) into `splits` parts on the device.
    fn split(&self, x: &CudaSlice<f32>, cols: usize, nt: usize, splits: usize) -> Res<DevX> {
        let mut xf = self.stream.alloc_zeros::<u32>(splits * nt * cols / 2)?;
        let mut xsum = self.stream.alloc_zeros::<f32>(nt * cols / GROUP)?;
        self.launch_split(x, &mut xf, &mut xsum, cols, nt, splits)?;
        Ok(DevX { nt, xf, xsum })
    }

    fn launch_split(
        &self,
        x: &CudaSlice<f32>,
        xf: &mut CudaSlice<u32>,
        xsum: &mut CudaSlice<f32>,
        cols: usize,
        nt: usize,
        splits: usize,
    ) -> Res<()> {
        let f = self.module.load_function(&split_kernel(splits))?;
        let (c, n) = (cols as i32, nt as i32);
        let threads = (nt * cols / GROUP) as u32;
        let cfg = LaunchConfig {
            grid_dim: (threads.div_ceil(64), 1, 1),
            block_dim: (64, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(&f);
        b.arg(x).arg(xf).arg(xsum).arg(&c).arg(&n);
        // SAFETY: (f32*, u32*, f32*, i32, i32); xf holds splits * nt * cols / 2 words, xsum
        // nt * cols / 64, x nt * cols.
        unsafe { b.launch(cfg) }?;
        Ok(())
    }

    /// y (`nt` rows of `m.rows`) = the product by variant `v`.
    fn product(&self, v: &MmaVariant, m: &DevMatrix, x: &DevX, y: &mut CudaSlice<f32>) -> Res<()> {
        let f = self.module.load_function(v.name)?;
        let (r, c, n) = (m.rows as i32, m.cols as i32, x.nt as i32);
        let cfg = LaunchConfig {
            grid_dim: ((m.rows / 16).div_ceil(v.rt) as u32, 1, 1),
            block_dim: (32 * v.kw as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(&f);
        b.arg(&m.words)
            .arg(&m.sb)
            .arg(&x.xf)
            .arg(&x.xsum)
            .arg(y)
            .arg(&r)
            .arg(&c)
            .arg(&n);
        // SAFETY: (uint4*, float2*, uint4*, f32*, f32*, i32 x3); the buffers are sized for
        // these rows, cols and nt (x split with this variant's parts); y holds nt * rows.
        unsafe { b.launch(cfg) }?;
        Ok(())
    }

    /// Runs variant `v` on `x_host` (`nt` rows) and downloads y.
    fn run(&self, v: &MmaVariant, m: &DevMatrix, x_host: &[f32], nt: usize) -> Res<Vec<f32>> {
        let x = self.stream.clone_htod(x_host)?;
        let dx = self.split(&x, m.cols, nt, v.splits)?;
        let mut y = self.stream.alloc_zeros::<f32>(nt * m.rows)?;
        self.product(v, m, &dx, &mut y)?;
        Ok(self.stream.clone_dtoh(&y)?)
    }
}

/// Step 1; true when every check holds.
fn check(p: &Probe) -> Res<bool> {
    let mut ok = true;
    let mut rng = Rng::new(0x5eed_0fa1);
    println!("| shape | variant | max error / sum of terms | bound | row 5 alone == column 5 |");
    println!("| --- | --- | ---: | ---: | --- |");
    for (rows, cols) in [(48, 256), (160, 1024), (4096, 4096)] {
        let m = Mlx4::random(rows, cols, &mut rng);
        let x: Vec<f32> = (0..8 * cols).map(|_| rng.uniform(-1.0, 1.0)).collect();
        let reference = m.reference(&x, 8);
        let dm = p.upload(&m, false)?;
        for v in &MMA_VARIANTS {
            let y = p.run(v, &dm, &x, 8)?;
            let solo = p.run(v, &dm, &x[5 * cols..6 * cols], 1)?;
            let err = max_rel_err(&y, &reference);
            // Over ten times what the host emulation saw (its sums are not the hardware's).
            let bound = if v.splits == 3 && v.sub { 8e-7 } else { 2e-5 };
            let same = y[5 * rows..6 * rows]
                .iter()
                .zip(&solo)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            ok &= err <= bound && same;
            println!(
                "| {rows}x{cols} | {} | {err:.2e} | {bound:.0e} | {same} |",
                v.name
            );
        }
        let planted = p.upload(&m, true)?;
        let err = max_rel_err(&p.run(&MMA_VARIANTS[0], &planted, &x, 8)?, &reference);
        let caught = err > 1e-2;
        ok &= caught;
        println!("| {rows}x{cols} | planted: rows g and g + 8 exchanged | {err:.2e} | > 1e-2 | caught {caught} |");
    }
    Ok(ok)
}

/// Step 2.
fn time(p: &Probe, iters: usize, peak: f64, only: Option<&str>) -> Res<()> {
    println!("\n| matrix | MB | variant | x rows | µs | GB/s | of peak |");
    println!("| --- | ---: | --- | ---: | ---: | ---: | ---: |");
    let mut rng = Rng::new(0x7133);
    for (label, rows, cols) in SHAPES {
        if only.is_some_and(|o| !label.contains(o)) {
            continue;
        }
        let m = Mlx4::random(rows, cols, &mut rng);
        let bytes = rows * cols / 2 + rows * cols / GROUP * 8;
        let copies = (256usize << 20).div_ceil(bytes).max(1);
        let mats: Vec<DevMatrix> = (0..copies)
            .map(|_| p.upload(&m, false))
            .collect::<Res<_>>()?;
        for nt in [1, 8] {
            let x: Vec<f32> = (0..nt * cols).map(|_| rng.uniform(-1.0, 1.0)).collect();
            let xd = p.stream.clone_htod(&x)?;
            let mut y = p.stream.alloc_zeros::<f32>(nt * rows)?;
            for splits in [2, 3] {
                let mut dx = p.split(&xd, cols, nt, splits)?;
                let us = time_us::<Error>(&p.stream, iters, |_| {
                    p.launch_split(&xd, &mut dx.xf, &mut dx.xsum, cols, nt, splits)
                })?;
                println!("| {label} | | x split into {splits} | {nt} | {us:.1} | | |");
                for v in MMA_VARIANTS.iter().filter(|v| v.splits == splits) {
                    p.product(v, &mats[0], &dx, &mut y)?;
                    let us = time_us::<Error>(&p.stream, iters, |i| {
                        p.product(v, &mats[i % copies], &dx, &mut y)
                    })?;
                    let gbs = bytes as f64 / (us * 1e-6) / 1e9;
                    println!(
                        "| {label} | {:.1} | {} | {nt} | {us:.1} | {gbs:.0} | {:.2} |",
                        bytes as f64 / 1e6,
                        v.name,
                        gbs * 1e9 / peak
                    );
                }
            }
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| args.windows(2).find(|w| w[0] == flag).map(|w| w[1].clone());
    let iters = value("--iters").and_then(|v| v.parse().ok()).unwrap_or(200);
    let peak = value("--peak")
        .and_then(|v| v.parse().ok())
        .unwrap_or(3.97e12);
    let only = value("--only");
    let run = || -> Res<bool> {
        let p = Probe::open()?;
        let ok = check(&p)?;
        time(&p, iters, peak, only.as_deref())?;
        Ok(ok)
    };
    match run() {
        Ok(true) => {
            println!("\nPASS");
            ExitCode::SUCCESS
        }
        Ok(false) => {
            println!("\nFAIL");
            ExitCode::from(1)
        }
        Err(e) => {
            println!("error: {e}\nFAIL");
            ExitCode::from(1)
        }
    }
}
