//! Contract cases for the tensor cores' MLX 4-bit product ([`crate::mma`]): accuracy against
//! an f64 reference and row invariance at every row count, with the launcher's choice (tiles a
//! block, x staged or not, x split once a call) and with each other (they must give the same
//! bits). Planted controls: the low parts of x dropped when a call has several rows (the
//! harness must catch the row variance), tiles made from a matrix with two rows exchanged (the
//! reference must catch it), and x split with its group sums taken in f32 (the bits check must
//! catch it). The bf16-scale cases take the compact tiles unless `TF_CUDA_MMA_B16=0` (the f16
//! one keeps the f32 pairs); each case's label names its layout.

use super::packed::HostWeights;
use super::{compare_bits, control, dense_reference, verdict, CaseResult, Depth, ErrSlot};
use super::{CpuBits, SuiteResult};
use crate::device::Gpu;
use crate::error::{CudaError, Result};
use crate::mma::{self, Choice, PLANT_ROW_VARIANT};
use crate::weights::{device_bytes, GpuFormat, GpuMatrix};
use crate::{ops, slices};
use cudarc::driver::CudaSlice;
use std::cell::RefCell;
use tf_kernels::contract::{Rng, RowOp, Tolerance};
use tf_kernels::matmul::FloatType;

const U: f64 = 1.0 / (1u64 << 24) as f64;

/// Most rows any call of the harness makes.
const MAX_ROWS: usize = 100;

/// Runs the mma cases and their controls.
pub(super) fn run(gpu: &Gpu, depth: Depth, out: &mut SuiteResult) -> Result<()> {
    use FloatType::{BF16, F16};
    let cases = [
        (64, F16, 576, 576, "q/o proj 576x576", true),
        (128, BF16, 1540, 4096, "1540x4096 (a partial tile)", false),
        (64, BF16, 256, 8192, "256x8192 (8 groups a warp)", false),
    ];
    for (i, &(group, ty, rows, cols, label, plants)) in cases.iter().enumerate() {
        let mut rng = Rng::new(0x3a3a + i as u64);
        let hw = HostWeights::random_mlx(4, group, ty, rows, cols, &mut rng);
        case(gpu, depth, &hw, group, ty, label, plants, i as u64, out)?;
    }
    Ok(())
}

/// What splits x for the split products in [`case`]: a split kernel by name, or the norm (over
/// one block a row, or wide over that many).
#[derive(Clone, Copy)]
enum Splitter {
    Kernel(&'static str),
    Norm,
    WideNorm(usize),
}

/// The tiles of `hw`, with weight rows `swap` exchanged first (a planted control) if given.
fn tiles(gpu: &Gpu, hw: &HostWeights, swap: Option<(usize, usize)>) -> Result<GpuMatrix> {
    let mut bytes = device_bytes(&hw.packed())?.into_owned();
    if let Some((a, b)) = swap {
        let rb = GpuFormat::Mlx4.row_bytes(hw.cols);
        let (lo, hi) = bytes.split_at_mut(b * rb);
        lo[a * rb..(a + 1) * rb].swap_with_slice(&mut hi[..rb]);
    }
    let rows = GpuMatrix::from_device_layout(gpu, GpuFormat::Mlx4, hw.rows, hw.cols, &bytes)?;
    mma::tile(gpu, &rows)
}

/// One matrix: the contract verdict with the launcher's choice, each choice's bits against it,
/// and (`plants`) the two controls.
#[allow(clippy::too_many_arguments)]
fn case(
    gpu: &Gpu,
    depth: Depth,
    hw: &HostWeights,
    group: usize,
    ty: FloatType,
    label: &str,
    plants: bool,
    seed: u64,
    out: &mut SuiteResult,
) -> Result<()> {
    let (rows, cols) = (hw.rows, hw.cols);
    let wf: Vec<f64> = (0..rows).flat_map(|j| hw.row_f64(j)).collect();
    let wmax = wf.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let w = tiles(gpu, hw, None)?;
    let bufs = RefCell::new((
        gpu.zeros::<f32>(MAX_ROWS * cols)?,
        gpu.zeros::<f32>(MAX_ROWS * rows)?,
    ));
    let errs = ErrSlot::default();
    // `how`: a kernel and its choice (None: the launcher's).
    let run_how = |w: &GpuMatrix, how: Option<(&str, Choice)>, xs: &[Vec<f32>], o: &mut [f32]| {
        let r = (|| -> Result<()> {
            let mut b = bufs.borrow_mut();
            let (x, y) = &mut *b;
            let flat: Vec<f32> = xs.iter().flatten().copied().collect();
            gpu.write(&flat, x)?;
            match how {
                Some((k, c)) => mma::matmul_with(gpu, k, c, w, x, xs.len(), y)?,
                None => mma::matmul(gpu, w, x, xs.len(), y)?,
            }
            o.copy_from_slice(&gpu.download(y, o.len())?);
            Ok(())
        })();
        if let Err(e) = r {
            errs.put(e, o);
        }
    };
    // |x| <= 1: x's two bf16 parts leave at most 2^-17 |x| each (8 units of 2^-24 a term), the
    // f32 sums of a group and of the groups (a term's share of them), the epilogue's FMAs; the
    // 128 in the group's sums (128 + q, then 128 s X off): up to 271 s a term, where wmax >= 7.5 s
    // (a group's 16 codes span 15 s), so 36 more.
    let k = cols as f64;
    let abs = (8.0 + 16.0 + 36.0 + (cols / 64) as f64 / 16.0 + 4.0) * U * k * wmax;
    let gen = |r: &mut Rng, _: usize| r.vec_uniform(cols, -1.0, 1.0);
    let reference = |x: &Vec<f32>, o: &mut [f64]| dense_reference(&wf, cols, x, o);
    let name = format!("matmul mma MLX 4-bit g{group} {ty:?}");
    let op = RowOp {
        name: &name,
        out_width: rows,
        tolerance: Tolerance::new(abs, 0.0),
        gen_row: &gen,
        reference: &reference,
    };
    let cfg = depth.config(0x3a1 + seed);
    let run = |xs: &[Vec<f32>], o: &mut [f32]| run_how(&w, None, xs, o);
    let v = verdict(&op, &run, &cfg, &errs);
    // Each choice at 40 rows (where its staging fits) and one row alone, against the
    // launcher's 40 rows.
    let mut r2 = Rng::new(0x3a2 + seed);
    let xs: Vec<Vec<f32>> = (0..40).map(|_| r2.vec_uniform(cols, -1.0, 1.0)).collect();
    let mut want = vec![0f32; 40 * rows];
    run(&xs, &mut want);
    let mut bits = CpuBits {
        compared: 0,
        differing: 0,
        max_abs_diff: 0.0,
    };
    for c in Choice::ALL {
        for n in [40, 1].into_iter().filter(|&n| c.fits(n, cols)) {
            let mut y = vec![0f32; n * rows];
            run_how(&w, Some((c.kernel(), c)), &xs[..n], &mut y);
            bits.add(compare_bits(&y, &want[..n * rows]));
        }
    }
    // x split once (by tf_mma_split, and by the norm that writes it) into the split products.
    let gain = gpu.upload(&r2.vec_uniform(cols, 0.5, 1.5))?;
    let mut sx = mma::SplitX::new(gpu, MAX_ROWS, cols)?;
    let mut h = gpu.zeros::<f32>(MAX_ROWS * cols)?;
    let mut x_next = gpu.zeros::<f32>(MAX_ROWS * cols)?;
    // y of the split product of the first n rows split by `splitter`, then (a kernel) the same
    // product on three blocks, each taking its tile groups in turn (`mma::Blocks::AtMost`, as a
    // one-token round's shared expert runs; y filled with NaN first, so an output no block
    // writes cannot pass); or (a norm) of their norm split by the norm, then the launcher's
    // product of that norm unsplit.
    let mut split_run = |splitter: Splitter, rt: usize, n: usize| -> Result<Vec<f32>> {
        let mut b = bufs.borrow_mut();
        let (x, y) = &mut *b;
        let flat: Vec<f32> = xs[..n].iter().flatten().copied().collect();
        gpu.write(&flat, x)?;
        let res = ops::Residual::None;
        match splitter {
            Splitter::Kernel(k) => mma::split_with(gpu, k, x, n, &mut sx)?,
            Splitter::Norm => {
                ops::residual_rms_norm(gpu, x, res, &gain, 1e-5, n, &mut h, Some(&mut sx))?
            }
            Splitter::WideNorm(blocks) => {
                let next = &mut x_next;
                ops::residual_rms_norm_wide(
                    gpu, x, next, res, &gain, 1e-5, n, &mut h, &mut sx, blocks,
                )?
            }
        }
        mma::matmul_split_with(gpu, rt, &w, &sx, n, y)?;
        let mut out = gpu.download(y, n * rows)?;
        match splitter {
            Splitter::Kernel(_) => {
                gpu.write(&vec![f32::NAN; n * rows], y)?;
                let (tiles, three) = (rows.div_ceil(16), mma::Blocks::AtMost(3));
                mma::matmul_split_span(gpu, rt, &w, &sx, n, y, 0..tiles, three, mma::Tail::Plain)?;
            }
            _ => {
                ops::rms_norm(gpu, x, &gain, 1e-5, n, &mut h)?;
                mma::matmul(gpu, &w, &h, n, y)?;
            }
        }
        out.extend(gpu.download(y, n * rows)?);
        Ok(out)
    };
    for rt in [1, 2] {
        for n in [40, 1] {
            let got = split_run(Splitter::Kernel("tf_mma_split"), rt, n)?;
            for y in got.chunks(n * rows) {
                bits.add(compare_bits(y, &want[..n * rows]));
            }
            // The norm over one block a row, and (rows it holds) over three blocks (uneven
            // shares) and a block a group.
            let wide = match cols <= ops::WIDE_NORM_WIDTH {
                true => vec![Splitter::WideNorm(3), Splitter::WideNorm(cols / 64)],
                false => vec![],
            };
            for norm in [Splitter::Norm].into_iter().chain(wide) {
                let normed = split_run(norm, rt, n)?;
                let (split, unsplit) = normed.split_at(n * rows);
                bits.add(compare_bits(split, unsplit));
            }
        }
    }
    // The planted split, read by the product on every block and on three.
    let planted = split_run(Splitter::Kernel(mma::PLANT_SPLIT_SUMS), 1, 40)?;
    let (planted, planted_capped) = planted.split_at(40 * rows);
    let (planted, planted_capped) = (
        compare_bits(planted, &want[..40 * rows]),
        compare_bits(planted_capped, &want[..40 * rows]),
    );
    let verdict = bits.gate(v, "the launcher's bits").and_then(|r| {
        let taken = rows_kernels_taking(gpu, &w, &mut bufs.borrow_mut());
        match taken.is_empty() {
            true => Ok(r),
            false => Err(format!("{taken:?} took the mma tiles as rows")),
        }
    });
    out.cases.push(CaseResult {
        op: name.clone(),
        case: format!(
            "{label}, {:?} (bits: each choice and x split once, by tf_mma_split (its product \
             also on three blocks) and by the norm over one block a row and, rows of at most \
             4096, over several, against the launcher's; rows kernels refuse the tiles)",
            w.layout()
        ),
        verdict,
        cpu_bits: Some(bits),
    });
    if plants {
        for (what, p) in [("", &planted), (" on three blocks", &planted_capped)] {
            out.controls.push(super::ControlResult {
                control: format!(
                    "matmul mma MLX 4-bit: x split with its group sums in f32 from x, the \
                     product{what}"
                ),
                caught: match p.differing {
                    0 => Err("the split products' bits check saw no difference".into()),
                    d => Ok(format!(
                        "the split products' bits: {d} of {} differ",
                        p.compared
                    )),
                },
            });
        }
    }
    if plants {
        let broken = |xs: &[Vec<f32>], o: &mut [f32]| {
            let plant = Choice {
                rt: 1,
                staged: false,
            };
            run_how(&w, Some((PLANT_ROW_VARIANT, plant)), xs, o)
        };
        let what = "matmul mma MLX 4-bit: x's low parts dropped when n > 1";
        out.controls.push(control(what, &op, &broken, &cfg, &errs));
        let swapped = tiles(gpu, hw, Some((3, 11)))?;
        let broken = |xs: &[Vec<f32>], o: &mut [f32]| run_how(&swapped, None, xs, o);
        let what = "matmul mma MLX 4-bit: tiles of the matrix with rows 3 and 11 exchanged";
        out.controls.push(control(what, &op, &broken, &cfg, &errs));
    }
    Ok(())
}

/// The rows layout's kernels that do not refuse `w` (in the mma tiles) by name
/// (`GpuMatrix::need_rows`): they would read the tiles' bytes as weight rows.
fn rows_kernels_taking(
    gpu: &Gpu,
    w: &GpuMatrix,
    (x, y): &mut (CudaSlice<f32>, CudaSlice<f32>),
) -> Vec<&'static str> {
    let rows_kernel = GpuFormat::Mlx4.matmul_kernel();
    let tries = [
        (
            "tf_slices_mlx4",
            slices::matmul_with(gpu, "tf_slices_mlx4", w, x, 2, y),
        ),
        (rows_kernel, ops::matmul_with(gpu, rows_kernel, w, x, 2, y)),
    ];
    let refused = |r: &Result<()>| matches!(r, Err(CudaError::Shape { detail, .. }) if detail.contains("not in rows"));
    tries
        .into_iter()
        .filter(|(_, r)| !refused(r))
        .map(|(k, _)| k)
        .collect()
}

/// Experts of the grouped case.
const EXPERTS: usize = 5;

/// The expert a row goes to: a function of its own values only, so a row alone goes where it
/// goes among others (`shift`: a planted control sends it to the next expert).
fn expert_of(x: &[f32], shift: usize) -> usize {
    ((x[0].to_bits() >> 7) as usize + shift) % EXPERTS
}

/// The grouped expert product (`tf_moe_mma_mlx4`, staged for one row): each row multiplies the
/// expert its values pick. Accuracy against f64 and row invariance; planted: rows sent to the
/// next expert (the reference must catch it).
pub(super) fn grouped(gpu: &Gpu, depth: Depth, out: &mut SuiteResult) -> Result<()> {
    let (rows, cols) = (2688 / 8, 1024);
    let mut rng = Rng::new(0x3a3a_00e0);
    let hw = HostWeights::random_mlx(4, 64, FloatType::BF16, EXPERTS * rows, cols, &mut rng);
    let wf: Vec<f64> = (0..EXPERTS * rows).flat_map(|j| hw.row_f64(j)).collect();
    let wmax = wf.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let stacked = GpuMatrix::upload(gpu, &hw.packed())?;
    let experts = crate::moe::GpuExperts::stacked(stacked, EXPERTS)?.for_products(gpu, 64)?;
    if !experts.matrix().layout().is_mma() {
        return Err(crate::error::CudaError::Shape {
            op: "mma suite",
            detail: "the grouped case's experts were not tiled".into(),
        });
    }
    let bufs = RefCell::new((
        gpu.zeros::<f32>(MAX_ROWS * cols)?,
        gpu.zeros::<f32>(MAX_ROWS * rows)?,
    ));
    let errs = ErrSlot::default();
    let sx = RefCell::new(mma::SplitX::new(gpu, MAX_ROWS, cols)?);
    // `split`: the rows split once (tf_mma_split) into the split product.
    let run_how = |shift: usize, split: bool, xs: &[Vec<f32>], o: &mut [f32]| {
        let r = (|| -> Result<()> {
            // Rows in expert order (stable), as the MoE gather lays them.
            let mut order: Vec<usize> = (0..xs.len()).collect();
            order.sort_by_key(|&i| expert_of(&xs[i], shift));
            let mut offsets = vec![0i32; EXPERTS + 1];
            for x in xs {
                offsets[expert_of(x, shift) + 1] += 1;
            }
            for e in 0..EXPERTS {
                offsets[e + 1] += offsets[e];
            }
            let flat: Vec<f32> = order.iter().flat_map(|&i| xs[i].clone()).collect();
            let mut b = bufs.borrow_mut();
            let (x, y) = &mut *b;
            gpu.write(&flat, x)?;
            let offs = gpu.upload(&offsets)?;
            let (k, n) = (experts.kernel, xs.len());
            match split {
                true => {
                    let mut s = sx.borrow_mut();
                    mma::split(gpu, x, n, &mut s)?;
                    // Odd row counts take one tile a block, even two.
                    let one_tile = n % 2 == 1;
                    let groups = crate::moe::Groups::Gathered(&offs);
                    crate::moe::expert_matmul_split(
                        gpu,
                        &experts,
                        &s,
                        y,
                        groups,
                        n,
                        1,
                        one_tile,
                        crate::mma::Tail::Plain,
                    )?;
                }
                false => crate::moe::expert_matmul(gpu, k, false, &experts, x, y, &offs, n, 1)?,
            }
            let g = gpu.download(y, xs.len() * rows)?;
            for (slot, &i) in order.iter().enumerate() {
                o[i * rows..(i + 1) * rows].copy_from_slice(&g[slot * rows..(slot + 1) * rows]);
            }
            Ok(())
        })();
        if let Err(e) = r {
            errs.put(e, o);
        }
    };
    let k = cols as f64;
    let abs = (8.0 + 16.0 + 36.0 + (cols / 64) as f64 / 4.0 + 4.0) * U * k * wmax;
    let gen = |r: &mut Rng, _: usize| r.vec_uniform(cols, -1.0, 1.0);
    let reference = |x: &Vec<f32>, o: &mut [f64]| {
        let e = expert_of(x, 0);
        dense_reference(&wf[e * rows * cols..(e + 1) * rows * cols], cols, x, o)
    };
    let name = "grouped experts mma MLX 4-bit g64 BF16";
    let op = RowOp {
        name,
        out_width: rows,
        tolerance: Tolerance::new(abs, 0.0),
        gen_row: &gen,
        reference: &reference,
    };
    let cfg = depth.config(0x3ae0);
    let run = |xs: &[Vec<f32>], o: &mut [f32]| run_how(0, false, xs, o);
    let verdict = verdict(&op, &run, &cfg, &errs);
    // The rows split once: the same bits, 30 rows (two tiles a block), 29 and one alone (one).
    let mut r2 = Rng::new(0x3ae1);
    let xs: Vec<Vec<f32>> = (0..30).map(|_| r2.vec_uniform(cols, -1.0, 1.0)).collect();
    let mut bits = CpuBits {
        compared: 0,
        differing: 0,
        max_abs_diff: 0.0,
    };
    for n in [30, 29, 1] {
        let (mut a, mut b) = (vec![0f32; n * rows], vec![0f32; n * rows]);
        run_how(0, false, &xs[..n], &mut a);
        run_how(0, true, &xs[..n], &mut b);
        bits.add(compare_bits(&b, &a));
    }
    out.cases.push(CaseResult {
        op: name.into(),
        case: format!(
            "{EXPERTS} experts of {rows}x{cols}, rows routed by their values (bits: the rows \
             split once, one and two tiles a block, against the product's)"
        ),
        verdict: bits.gate(verdict, "the product's bits"),
        cpu_bits: Some(bits),
    });
    let broken = |xs: &[Vec<f32>], o: &mut [f32]| run_how(1, false, xs, o);
    let what = "grouped experts mma: rows sent to the next expert";
    out.controls.push(control(what, &op, &broken, &cfg, &errs));
    Ok(())
}

/// A one-token round's experts with relu² made by the up product as it stores
/// ([`crate::mma::Tail::Relu2`], the `_one_relu2` entries) and the down product summing X in
/// place ([`crate::mma::Tail::SumsInPlace`], `_xin`), against the up product, relu² split and
/// the down product reading its sums: the same up, act and down bits, one tile a block and two;
/// and the same of the dense products (the shared expert's). Planted: the sums-reading down
/// product after the fold (which leaves the sums NaN) must differ.
pub(super) fn relu2_fold(gpu: &Gpu, out: &mut SuiteResult) -> Result<()> {
    use crate::mma::Tail;
    use crate::moe::{expert_matmul_split, relu2_split, GpuExperts, Groups};
    let (dim, inter, k) = (1024, 384, 3);
    let mut rng = Rng::new(0x3a3a_00f0);
    let mut stack = |rows: usize, cols: usize| -> Result<GpuExperts> {
        let hw = HostWeights::random_mlx(4, 64, FloatType::BF16, EXPERTS * rows, cols, &mut rng);
        GpuExperts::stacked(GpuMatrix::upload(gpu, &hw.packed())?, EXPERTS)?.for_products(gpu, 64)
    };
    let (up, down) = (stack(inter, dim)?, stack(dim, inter)?);
    let x = rng.vec_uniform(dim, -1.0, 1.0);
    // Picks 4, 0, 2 in that order; their rows in expert order at where_.
    let experts = gpu.upload(&[4i32, 0, 2])?;
    let where_ = gpu.upload(&[2i32, 0, 1])?;
    let offsets = gpu.upload(&[0i32, 1, 1, 2, 2, 3])?;
    let mut xs = mma::SplitX::new(gpu, 1, dim)?;
    mma::split(gpu, &gpu.upload(&x)?, 1, &mut xs)?;
    let mut acts = mma::SplitX::new(gpu, k, inter)?;
    let (mut y_up, mut act) = (gpu.zeros::<f32>(k * inter)?, gpu.zeros::<f32>(k * inter)?);
    let mut y = gpu.zeros::<f32>(k * dim)?;
    // fold 0: unfolded; 1: folded; 2: folded, then the down product that reads the sums.
    let mut chain = |fold: usize, one_tile: bool| -> Result<Vec<f32>> {
        gpu.write(&vec![f32::NAN; k * inter], &mut act)?;
        gpu.write(&vec![f32::NAN; k * inter / 64], &mut acts.sums)?;
        let picks = Groups::Picks(&experts, &where_);
        let gathered = Groups::Gathered(&offsets);
        let tail = match fold {
            0 => Tail::Plain,
            _ => Tail::Relu2(&mut act, &mut acts),
        };
        expert_matmul_split(gpu, &up, &xs, &mut y_up, picks, 1, k, one_tile, tail)?;
        if fold == 0 {
            relu2_split(gpu, &y_up, &mut act, &mut acts, k, inter)?;
        }
        let tail = match fold {
            1 => Tail::SumsInPlace,
            _ => Tail::Plain,
        };
        expert_matmul_split(gpu, &down, &acts, &mut y, gathered, 1, k, one_tile, tail)?;
        let mut got = gpu.download(&y_up, k * inter)?;
        got.extend(gpu.download(&act, k * inter)?);
        got.extend(gpu.download(&y, k * dim)?);
        Ok(got)
    };
    let mut bits = compare_bits(&[], &[]);
    let (mut caught, mut chains) = (0, 0);
    for one_tile in [true, false] {
        let want = chain(0, one_tile)?;
        bits.add(compare_bits(&chain(1, one_tile)?, &want));
        caught += compare_bits(&chain(2, one_tile)?, &want).differing;
        chains += 3;
    }
    // The dense products of up to four rows (a one-token round's shared expert: the `_relu2`
    // and `_xin` entries), one and two tiles a block, on three blocks (each taking its tiles in
    // turn, as the shared expert's capped blocks do).
    let mut dense = |rows: usize, cols: usize| {
        let hw = HostWeights::random_mlx(4, 64, FloatType::BF16, rows, cols, &mut rng);
        tiles(gpu, &hw, None)
    };
    let (up, down) = (dense(inter, dim)?, dense(dim, inter)?);
    let n = 3;
    let xn: Vec<f32> = (0..n * dim).map(|_| rng.uniform(-1.0, 1.0)).collect();
    let mut xs = mma::SplitX::new(gpu, n, dim)?;
    mma::split(gpu, &gpu.upload(&xn)?, n, &mut xs)?;
    let mut dense_chain = |fold: usize, rt: usize| -> Result<Vec<f32>> {
        gpu.write(&vec![f32::NAN; n * inter], &mut act)?;
        gpu.write(&vec![f32::NAN; n * inter / 64], &mut acts.sums)?;
        let three = mma::Blocks::AtMost(3);
        let tail = match fold {
            0 => Tail::Plain,
            _ => Tail::Relu2(&mut act, &mut acts),
        };
        let tiles = inter.div_ceil(16);
        mma::matmul_split_span(gpu, rt, &up, &xs, n, &mut y_up, 0..tiles, three, tail)?;
        if fold == 0 {
            relu2_split(gpu, &y_up, &mut act, &mut acts, n, inter)?;
        }
        let tail = match fold {
            1 => Tail::SumsInPlace,
            _ => Tail::Plain,
        };
        let tiles = dim.div_ceil(16);
        mma::matmul_split_span(gpu, rt, &down, &acts, n, &mut y, 0..tiles, three, tail)?;
        let mut got = gpu.download(&y_up, n * inter)?;
        got.extend(gpu.download(&act, n * inter)?);
        got.extend(gpu.download(&y, n * dim)?);
        Ok(got)
    };
    for rt in [1, 2] {
        let want = dense_chain(0, rt)?;
        bits.add(compare_bits(&dense_chain(1, rt)?, &want));
        caught += compare_bits(&dense_chain(2, rt)?, &want).differing;
        chains += 3;
    }
    let name = "experts mma: relu² made by the up product";
    out.cases.push(CaseResult {
        op: name.into(),
        case: format!(
            "one token, {k} picks of {EXPERTS} experts {dim} -> {inter} -> {dim}, and the dense \
             products of {n} rows: up, act and down against the up product, relu² split and the \
             sums-reading down, one and two tiles a block"
        ),
        verdict: match bits.differing {
            0 => Ok(tf_kernels::contract::Report {
                max_abs_err: 0.0,
                max_tol_ratio: 0.0,
                rows_compared: 2 * (k + n),
                calls: chains,
            }),
            d => Err(format!("{d} of {} values differ", bits.compared)),
        },
        cpu_bits: Some(bits),
    });
    out.controls.push(super::ControlResult {
        control: format!("{name}: the down product reading the sums the fold leaves unmade"),
        caught: match caught {
            0 => Err("every value matched".into()),
            c => Ok(format!("{c} values differ")),
        },
    });
    Ok(())
}
