//! Contract cases for the Mamba2 kernels: the conv + SSM step (accuracy against an f64 reference
//! of the recurrence, row invariance, GPU == CPU `mamba_step` bits), a sequence through one slot
//! in one round == token by token == interleaved with other slots == the CPU, and the gated
//! grouped RMSNorm; planted controls (reversed conv taps, no dt clamp, output read before the
//! state update, rows sharing one slot's state) must be caught.

#[cfg(test)]
mod host_cpp;

use super::{compare_bits, control, verdict, CaseResult, Depth, ErrSlot, SuiteResult};
use crate::device::Gpu;
use crate::error::{CudaError, Result};
use crate::kv::GpuKv;
use crate::mamba::{self, GpuMambaMixer, GpuMambaState, MambaShape};
use crate::ops::GpuRows;
use cudarc::driver::CudaSlice;
use std::cell::RefCell;
use tf_kernels::contract::{Report, Rng, RowOp, Tolerance};
use tf_kernels::ops::{exp, mamba_step, rms_norm_gated, MambaParams, MambaState};

const MAX_ROWS: usize = 100;
const TOL: Tolerance = Tolerance::new(2e-5, 2e-5);

fn cpu_err(op: &'static str) -> impl Fn(tf_kernels::ops::OpError) -> CudaError {
    move |e| CudaError::Shape {
        op,
        detail: e.to_string(),
    }
}

/// Owned constants of one mixer shape.
struct Consts {
    shape: MambaShape,
    conv_weight: Vec<f32>,
    conv_bias: Option<Vec<f32>>,
    a: Vec<f32>,
    d: Vec<f32>,
    dt_bias: Vec<f32>,
    dt_limit: (f32, f32),
}

impl Consts {
    fn new(seed: u64, shape: MambaShape, bias: bool, dt_limit: (f32, f32)) -> Consts {
        let mut r = Rng::new(seed);
        let cd = shape.conv_dim();
        let heads = shape.heads;
        Consts {
            shape,
            conv_weight: r.vec_normal(cd * shape.kernel, 0.5),
            conv_bias: bias.then(|| r.vec_normal(cd, 0.1)),
            a: (0..heads).map(|_| -exp(r.uniform(0.0, 2.0))).collect(),
            d: (0..heads).map(|_| 1.0 + 0.3 * r.normal()).collect(),
            dt_bias: (0..heads).map(|_| -1.0 + 0.7 * r.normal()).collect(),
            dt_limit,
        }
    }

    fn params(&self) -> MambaParams<'_> {
        let s = self.shape;
        MambaParams {
            n_heads: s.heads,
            head_dim: s.head_dim,
            n_groups: s.groups,
            state_size: s.state,
            conv_kernel: s.kernel,
            conv_weight: &self.conv_weight,
            conv_bias: self.conv_bias.as_deref(),
            a: &self.a,
            d: &self.d,
            dt_bias: &self.dt_bias,
            dt_limit: self.dt_limit,
        }
    }

    /// Output width of one step row: y, then the new conv and SSM states.
    fn width(&self) -> usize {
        self.shape.inner() + self.shape.conv_state_len() + self.shape.ssm_state_len()
    }
}

/// One row: a stream's state before the token, the token's conv input and raw dt.
#[derive(Clone)]
struct StepRow {
    conv: Vec<f32>,
    ssm: Vec<f32>,
    conv_in: Vec<f32>,
    dt: Vec<f32>,
}

fn gen_row(c: &Consts, r: &mut Rng) -> StepRow {
    let s = c.shape;
    StepRow {
        conv: r.vec_normal(s.conv_state_len(), 1.0),
        ssm: r.vec_normal(s.ssm_state_len(), 0.5),
        conv_in: r.vec_normal(s.conv_dim(), 1.0),
        dt: r.vec_normal(s.heads, 1.5),
    }
}

/// f64 reference of one step (written from the recurrence's definition): y, new conv state,
/// new SSM state.
fn reference_step(c: &Consts, row: &StepRow, out: &mut [f64]) {
    let s = c.shape;
    let (cd, k, inner, ns) = (s.conv_dim(), s.kernel, s.inner(), s.state);
    let mut xbc = vec![0f64; cd];
    for (ch, o) in xbc.iter_mut().enumerate() {
        let mut acc: f64 = (0..k)
            .map(|t| {
                let v = if t + 1 == k {
                    row.conv_in[ch]
                } else {
                    row.conv[t * cd + ch]
                };
                c.conv_weight[ch * k + t] as f64 * v as f64
            })
            .sum();
        acc += c.conv_bias.as_ref().map_or(0.0, |b| b[ch] as f64);
        *o = acc / (1.0 + (-acc).exp());
    }
    let (b0, c0) = (inner, inner + s.groups * ns);
    let mut ssm: Vec<f64> = row.ssm.iter().map(|&v| v as f64).collect();
    for h in 0..s.heads {
        let g = h / (s.heads / s.groups);
        let v = row.dt[h] as f64 + c.dt_bias[h] as f64;
        let dt = (1.0 + v.exp())
            .ln()
            .clamp(c.dt_limit.0 as f64, c.dt_limit.1 as f64);
        let da = (dt * c.a[h] as f64).exp();
        for p in 0..s.head_dim {
            let xi = xbc[h * s.head_dim + p];
            let mut y = 0f64;
            for n in 0..ns {
                let st = &mut ssm[(h * s.head_dim + p) * ns + n];
                *st = da * *st + dt * xi * xbc[b0 + g * ns + n];
                y += *st * xbc[c0 + g * ns + n];
            }
            out[h * s.head_dim + p] = y + xi * c.d[h] as f64;
        }
    }
    let mut conv: Vec<f64> = row.conv.iter().map(|&v| v as f64).collect();
    if k > 1 {
        conv.drain(..cd);
        conv.extend(row.conv_in.iter().map(|&v| v as f64));
    }
    out[inner..inner + conv.len()].copy_from_slice(&conv);
    out[inner + conv.len()..].copy_from_slice(&ssm);
}

/// The CPU kernel on each row's own copy of its state (same output layout).
fn cpu_rows(c: &Consts, rows: &[StepRow], out: &mut [f32]) -> Result<()> {
    let p = c.params();
    let mut conv = vec![0f32; c.shape.conv_dim()];
    for (row, o) in rows.iter().zip(out.chunks_exact_mut(c.width())) {
        let mut st = MambaState {
            conv: row.conv.clone(),
            ssm: row.ssm.clone(),
        };
        let (y, rest) = o.split_at_mut(c.shape.inner());
        mamba_step(&p, &mut st, &row.conv_in, &row.dt, &mut conv, y)
            .map_err(cpu_err("cpu mamba_step"))?;
        rest[..st.conv.len()].copy_from_slice(&st.conv);
        rest[st.conv.len()..].copy_from_slice(&st.ssm);
    }
    Ok(())
}

/// Device buffers of one shape's cases.
struct Bench<'g> {
    gpu: &'g Gpu,
    mixer: GpuMambaMixer,
    state: GpuMambaState,
    kv: GpuKv,
    rows: GpuRows,
    proj: CudaSlice<f32>,
    xbc: CudaSlice<f32>,
    y: CudaSlice<f32>,
}

/// Which kernels a run uses (the production pair or a planted one).
#[derive(Clone, Copy)]
struct Kernels {
    conv: &'static str,
    ssm: &'static str,
    /// Every row on slot 0 when the call has more than one row (a planted control).
    shared_slot: bool,
}

/// The production pair: the scan's entry as serving selects it (`mamba::ssm_kernel`).
fn prod() -> Kernels {
    Kernels {
        conv: "tf_mamba_conv",
        ssm: crate::mamba::ssm_kernel(),
        shared_slot: false,
    }
}

impl<'g> Bench<'g> {
    fn new(gpu: &'g Gpu, c: &Consts) -> Result<Bench<'g>> {
        let s = c.shape;
        Ok(Bench {
            gpu,
            mixer: GpuMambaMixer::upload(gpu, &c.params())?,
            state: GpuMambaState::new(gpu, MAX_ROWS, &[s])?,
            kv: GpuKv::new(gpu, MAX_ROWS, 1, 64, 1, 1)?,
            rows: GpuRows::new(gpu, MAX_ROWS)?,
            proj: gpu.zeros(MAX_ROWS * (s.conv_dim() + s.heads))?,
            xbc: gpu.zeros(MAX_ROWS * s.conv_dim())?,
            y: gpu.zeros(MAX_ROWS * s.inner())?,
        })
    }

    /// Runs one round: `rows[i] = (slot, pos, conv_in, dt)`; returns y `[n, inner]`.
    fn round(&mut self, k: Kernels, rows: &[(usize, usize, &[f32], &[f32])]) -> Result<Vec<f32>> {
        let sh = self.mixer.shape();
        let stride = sh.conv_dim() + sh.heads;
        let mut proj = Vec::with_capacity(rows.len() * stride);
        for r in rows {
            proj.extend_from_slice(r.2);
            proj.extend_from_slice(r.3);
        }
        let slots: Vec<usize> = rows.iter().map(|r| r.0).collect();
        let pos: Vec<usize> = rows.iter().map(|r| r.1).collect();
        self.rows.set(self.gpu, &self.kv, &slots, &pos)?;
        self.gpu.write(&proj, &mut self.proj)?;
        let (g, m) = (self.gpu, &self.mixer);
        mamba::conv_step_with(
            g,
            k.conv,
            m,
            &self.proj,
            stride,
            0,
            &mut self.state,
            0,
            &self.rows,
            &mut self.xbc,
        )?;
        mamba::ssm_step_with(
            g,
            k.ssm,
            m,
            &self.xbc,
            &self.proj,
            stride,
            sh.conv_dim(),
            &mut self.state,
            0,
            &self.rows,
            &mut self.y,
        )?;
        self.gpu.download(&self.y, rows.len() * sh.inner())
    }

    /// The step rows on the GPU, each on its own slot from its given state: y and new states.
    fn step_rows(
        &mut self,
        k: Kernels,
        c: &Consts,
        rows: &[StepRow],
        out: &mut [f32],
    ) -> Result<()> {
        let shared = k.shared_slot && rows.len() > 1;
        for (i, r) in rows.iter().enumerate() {
            if !shared || i == 0 {
                self.state.write(self.gpu, i, 0, &r.conv, &r.ssm)?;
            }
        }
        let spec: Vec<(usize, usize, &[f32], &[f32])> = rows
            .iter()
            .enumerate()
            .map(|(i, r)| (if shared { 0 } else { i }, 1, &r.conv_in[..], &r.dt[..]))
            .collect();
        let y = self.round(k, &spec)?;
        let inner = c.shape.inner();
        for (i, o) in out.chunks_exact_mut(c.width()).enumerate() {
            o[..inner].copy_from_slice(&y[i * inner..(i + 1) * inner]);
            let (conv, ssm) = self.state.read(self.gpu, if shared { 0 } else { i }, 0)?;
            o[inner..inner + conv.len()].copy_from_slice(&conv);
            o[inner + conv.len()..].copy_from_slice(&ssm);
        }
        Ok(())
    }
}

/// Runs the Mamba cases and controls.
pub(super) fn run(gpu: &Gpu, depth: Depth, out: &mut SuiteResult) -> Result<()> {
    let sh = |heads, head_dim, groups, state, kernel| MambaShape {
        heads,
        head_dim,
        groups,
        state,
        kernel,
    };
    let inf = f32::INFINITY;
    let cases = [
        Consts::new(1, sh(8, 16, 2, 16, 4), true, (0.0, inf)),
        Consts::new(2, sh(4, 16, 1, 8, 3), false, (0.05, 0.8)),
        Consts::new(3, sh(6, 5, 3, 7, 2), true, (0.001, 100.0)),
        Consts::new(4, sh(2, 4, 1, 16, 1), false, (0.0, inf)),
        Consts::new(5, sh(8, 64, 2, 128, 4), true, (0.0, inf)),
    ];
    for (i, c) in cases.iter().enumerate() {
        step_case(gpu, depth, c, i == 1, out, 0x3a0 + i as u64)?;
        sequence_case(gpu, c, out, 0x3b0 + i as u64)?;
    }
    for (width, groups) in [(128usize, 2usize), (64, 1), (35, 5), (4096, 8)] {
        let with_control = width == 4096;
        let seed = 0x3c0 + width as u64;
        norm_case(gpu, depth, width, groups, with_control, out, seed)?;
    }
    Ok(())
}

fn step_case(
    gpu: &Gpu,
    depth: Depth,
    c: &Consts,
    with_controls: bool,
    out: &mut SuiteResult,
    seed: u64,
) -> Result<()> {
    let bench = RefCell::new(Bench::new(gpu, c)?);
    let errs = ErrSlot::default();
    let run_k = |k: Kernels, rows: &[StepRow], o: &mut [f32]| {
        if let Err(e) = bench.borrow_mut().step_rows(k, c, rows, o) {
            errs.put(e, o);
        }
    };
    let gen = |r: &mut Rng, _: usize| gen_row(c, r);
    let reference = |row: &StepRow, o: &mut [f64]| reference_step(c, row, o);
    let op = RowOp {
        name: "mamba_step",
        out_width: c.width(),
        tolerance: TOL,
        gen_row: &gen,
        reference: &reference,
    };
    let cfg = depth.config(seed);
    let run = |rows: &[StepRow], o: &mut [f32]| run_k(prod(), rows, o);
    let v = verdict(&op, &run, &cfg, &errs);
    let mut rng = Rng::new(seed ^ 0x55);
    let rows: Vec<StepRow> = (0..33).map(|_| gen_row(c, &mut rng)).collect();
    let mut g = vec![0f32; 33 * c.width()];
    run(&rows, &mut g);
    let mut cpu = vec![0f32; 33 * c.width()];
    cpu_rows(c, &rows, &mut cpu)?;
    let s = c.shape;
    let bits = compare_bits(&g, &cpu);
    out.cases.push(CaseResult {
        op: "mamba conv + ssm step".into(),
        case: format!(
            "{}: heads {} x {}, groups {}, state {}, kernel {}, bias {}, dt limit {:?}",
            prod().ssm,
            s.heads,
            s.head_dim,
            s.groups,
            s.state,
            s.kernel,
            c.conv_bias.is_some(),
            c.dt_limit
        ),
        verdict: bits.gate(v, "the CPU kernel's bits"),
        cpu_bits: Some(bits),
    });
    if with_controls {
        let planted = [
            (
                "mamba conv: taps reversed (oldest input times the newest tap)",
                Kernels {
                    conv: "tf_plant_mamba_conv_reversed",
                    ..prod()
                },
            ),
            (
                "mamba ssm: dt not clamped to time_step_limit",
                Kernels {
                    ssm: "tf_plant_mamba_ssm_unclamped",
                    ..prod()
                },
            ),
            (
                "mamba ssm: output read from the state before its update",
                Kernels {
                    ssm: "tf_plant_mamba_ssm_stale",
                    ..prod()
                },
            ),
            (
                "mamba: every row of a multi-row round on slot 0's state",
                Kernels {
                    shared_slot: true,
                    ..prod()
                },
            ),
        ];
        for (name, k) in planted {
            let broken = |rows: &[StepRow], o: &mut [f32]| run_k(k, rows, o);
            out.controls.push(control(name, &op, &broken, &cfg, &errs));
        }
    }
    Ok(())
}

/// One slot fed a sequence: all tokens in one round == one token per round == interleaved with
/// two other slots in shared rounds == the CPU's token-by-token `mamba_step`, bit for bit
/// (outputs and final state); the sequence starts at position 0 over a dirty slot (reset).
fn sequence_case(gpu: &Gpu, c: &Consts, out: &mut SuiteResult, seed: u64) -> Result<()> {
    const T: usize = 12;
    let s = c.shape;
    let mut rng = Rng::new(seed);
    let seqs: Vec<Vec<(Vec<f32>, Vec<f32>)>> = (0..3)
        .map(|_| {
            (0..T)
                .map(|_| {
                    (
                        rng.vec_normal(s.conv_dim(), 1.0),
                        rng.vec_normal(s.heads, 1.5),
                    )
                })
                .collect()
        })
        .collect();
    let mut b = Bench::new(gpu, c)?;
    // Dirty every slot first: position 0 must ignore what is stored.
    for slot in 0..4 {
        let junk = (
            rng.vec_normal(s.conv_state_len(), 3.0),
            rng.vec_normal(s.ssm_state_len(), 3.0),
        );
        b.state.write(gpu, slot, 0, &junk.0, &junk.1)?;
    }
    // CPU: token by token from the zero state.
    let p = c.params();
    let mut cpu_state = MambaState::new(&p);
    let (mut conv, mut y) = (vec![0f32; s.conv_dim()], vec![0f32; s.inner()]);
    let mut cpu = Vec::new();
    for (x, dt) in &seqs[0] {
        mamba_step(&p, &mut cpu_state, x, dt, &mut conv, &mut y)
            .map_err(cpu_err("cpu mamba_step"))?;
        cpu.extend_from_slice(&y);
    }
    let cpu_final = [cpu_state.conv.clone(), cpu_state.ssm.clone()].concat();
    // GPU: one round, slot 0.
    let all: Vec<(usize, usize, &[f32], &[f32])> = seqs[0]
        .iter()
        .enumerate()
        .map(|(t, (x, dt))| (0, t, &x[..], &dt[..]))
        .collect();
    let chunked = b.round(prod(), &all)?;
    let chunked_final = {
        let (cv, sv) = b.state.read(gpu, 0, 0)?;
        [cv, sv].concat()
    };
    // GPU: one row per round, slot 1.
    let mut serial = Vec::new();
    for (t, (x, dt)) in seqs[0].iter().enumerate() {
        serial.extend(b.round(prod(), &[(1, t, &x[..], &dt[..])])?);
    }
    // GPU: slots 2, 3, 0 interleaved in shared rounds of varying composition (slot 3 carries
    // the sequence under test; slots 2 and 0 carry others).
    let mut inter = Vec::new();
    let mut t = 0;
    while t < T {
        let take = 1 + t % 3;
        let mut round: Vec<(usize, usize, &[f32], &[f32])> = Vec::new();
        let (s0, s1, s2) = (&seqs[0], &seqs[1], &seqs[2]);
        #[allow(clippy::needless_range_loop)] // one position indexes three sequences
        for u in t..(t + take).min(T) {
            round.push((2, u, &s1[u].0[..], &s1[u].1[..]));
            round.push((3, u, &s0[u].0[..], &s0[u].1[..]));
            round.push((0, u, &s2[u].0[..], &s2[u].1[..]));
        }
        let yy = b.round(prod(), &round)?;
        for (j, r) in round.iter().enumerate() {
            if r.0 == 3 {
                inter.extend_from_slice(&yy[j * s.inner()..(j + 1) * s.inner()]);
            }
        }
        t += take;
    }
    let inter_final = {
        let (cv, sv) = b.state.read(gpu, 3, 0)?;
        [cv, sv].concat()
    };
    let gpu_all = [chunked, serial, inter, chunked_final, inter_final].concat();
    let cpu_all = [cpu.clone(), cpu.clone(), cpu, cpu_final.clone(), cpu_final].concat();
    let bits = compare_bits(&gpu_all, &cpu_all);
    let verdict = if bits.differing == 0 {
        Ok(Report {
            max_abs_err: 0.0,
            max_tol_ratio: 0.0,
            rows_compared: 3 * T,
            calls: 1 + T + T.div_ceil(2),
        })
    } else {
        Err(format!(
            "{} of {} values differ from the CPU's token-by-token recurrence (max {:.2e})",
            bits.differing, bits.compared, bits.max_abs_diff
        ))
    };
    out.cases.push(CaseResult {
        op: "mamba sequence".into(),
        case: format!(
            "{T} tokens from a dirty slot at position 0: one round == serial == interleaved with 2 slots == CPU (heads {}, state {}, kernel {})",
            s.heads, s.state, s.kernel
        ),
        verdict,
        cpu_bits: Some(bits),
    });
    Ok(())
}

/// A gated norm case's rows as the launchers read them: y, z and (z_stride, gain, eps, groups).
fn gated_in<'a>(
    y: &'a CudaSlice<f32>,
    z: &'a CudaSlice<f32>,
    (z_stride, gain, eps, groups): (usize, &'a CudaSlice<f32>, f32, usize),
) -> mamba::GatedNormIn<'a> {
    mamba::GatedNormIn {
        y,
        z,
        z_stride,
        gain,
        eps,
        groups,
    }
}

/// The grouped gated RMSNorm against f64 and the CPU's bits; `with_control`: also its planted
/// control (a group's last element left out of its sum of squares).
#[allow(clippy::too_many_arguments)]
fn norm_case(
    gpu: &Gpu,
    depth: Depth,
    width: usize,
    groups: usize,
    with_control: bool,
    out: &mut SuiteResult,
    seed: u64,
) -> Result<()> {
    let eps = 1e-5f32;
    let mut rng = Rng::new(seed);
    let gain_h = rng.vec_uniform(width, 0.5, 1.5);
    let gain = gpu.upload(&gain_h)?;
    // z rows live inside wider rows (stride 2 * width + 3), as in an in_proj output.
    let zs = 2 * width + 3;
    let y = RefCell::new(gpu.zeros::<f32>(MAX_ROWS * width)?);
    let z = RefCell::new(gpu.zeros::<f32>(MAX_ROWS * zs)?);
    let o = RefCell::new(gpu.zeros::<f32>(MAX_ROWS * width)?);
    let errs = ErrSlot::default();
    let run_k = |kernel: &'static str, rows: &[(Vec<f32>, Vec<f32>)], out: &mut [f32]| {
        let r = (|| -> Result<()> {
            let yf: Vec<f32> = rows.iter().flat_map(|r| r.0.iter().copied()).collect();
            let mut zf = vec![0f32; rows.len() * zs];
            for (i, r) in rows.iter().enumerate() {
                zf[i * zs..i * zs + width].copy_from_slice(&r.1);
            }
            let (mut yb, mut zb, mut ob) = (y.borrow_mut(), z.borrow_mut(), o.borrow_mut());
            gpu.write(&yf, &mut yb)?;
            gpu.write(&zf, &mut zb)?;
            let n = rows.len();
            let g = gated_in(&yb, &zb, (zs, &gain, eps, groups));
            mamba::gated_norm_with(gpu, kernel, &g, n, &mut ob)?;
            out.copy_from_slice(&gpu.download(&ob, out.len())?);
            Ok(())
        })();
        if let Err(e) = r {
            errs.put(e, out);
        }
    };
    let run =
        |rows: &[(Vec<f32>, Vec<f32>)], out: &mut [f32]| run_k("tf_mamba_gated_norm", rows, out);
    let gen = |r: &mut Rng, _: usize| (r.vec_normal(width, 1.0), r.vec_normal(width, 2.0));
    let gs = width / groups;
    let reference = |row: &(Vec<f32>, Vec<f32>), out: &mut [f64]| {
        let h: Vec<f64> = row
            .0
            .iter()
            .zip(&row.1)
            .map(|(&y, &z)| y as f64 * (z as f64 / (1.0 + (-(z as f64)).exp())))
            .collect();
        for g in 0..groups {
            let hg = &h[g * gs..(g + 1) * gs];
            let ss: f64 = hg.iter().map(|v| v * v).sum();
            let r = 1.0 / (ss / gs as f64 + eps as f64).sqrt();
            for (k, v) in hg.iter().enumerate() {
                out[g * gs + k] = gain_h[g * gs + k] as f64 * v * r;
            }
        }
    };
    let op = RowOp {
        name: "rms_norm_gated",
        out_width: width,
        tolerance: Tolerance::new(2e-6, 4e-6),
        gen_row: &gen,
        reference: &reference,
    };
    let cfg = depth.config(seed);
    let v = verdict(&op, &run, &cfg, &errs);
    if with_control {
        let broken = |rows: &[(Vec<f32>, Vec<f32>)], o: &mut [f32]| {
            run_k(mamba::PLANT_GATED_NORM_SHORT, rows, o)
        };
        let name = "rms_norm_gated: each group's last element left out of its sum of squares";
        out.controls.push(control(name, &op, &broken, &cfg, &errs));
    }
    let rows: Vec<(Vec<f32>, Vec<f32>)> = (0..33).map(|i| gen(&mut rng, i)).collect();
    let mut g = vec![0f32; 33 * width];
    run(&rows, &mut g);
    let yf: Vec<f32> = rows.iter().flat_map(|r| r.0.iter().copied()).collect();
    let zf: Vec<f32> = rows.iter().flat_map(|r| r.1.iter().copied()).collect();
    let mut cpu = vec![0f32; 33 * width];
    rms_norm_gated(&yf, &zf, &gain_h, eps, groups, 33, &mut cpu)
        .map_err(cpu_err("cpu rms_norm_gated"))?;
    let mut bits = compare_bits(&g, &cpu);
    // The wide gated norm, where a group is whole 64-column groups: the CPU's bits too, and
    // its split those of tf_mma_split of them.
    let wide = gs.is_multiple_of(crate::mma::GROUP);
    if wide {
        let mut zf = vec![0f32; 33 * zs];
        for (i, r) in rows.iter().enumerate() {
            zf[i * zs..i * zs + width].copy_from_slice(&r.1);
        }
        let (mut yb, mut zb, mut ob) = (y.borrow_mut(), z.borrow_mut(), o.borrow_mut());
        gpu.write(&yf, &mut yb)?;
        gpu.write(&zf, &mut zb)?;
        let mut sx = crate::mma::SplitX::new(gpu, 33, width)?;
        let mut want = crate::mma::SplitX::new(gpu, 33, width)?;
        let blocks = 3.min(gs / crate::mma::GROUP);
        let g = gated_in(&yb, &zb, (zs, &gain, eps, groups));
        mamba::gated_norm_wide(gpu, &g, 33, &mut ob, &mut sx, blocks)?;
        bits.add(compare_bits(&gpu.download(&ob, 33 * width)?, &cpu));
        crate::mma::split(gpu, &ob, 33, &mut want)?;
        let parts = |s: &crate::mma::SplitX| -> Result<Vec<f32>> {
            let p = gpu.download(&s.parts, 33 * width)?;
            let mut v: Vec<f32> = p.into_iter().map(f32::from_bits).collect();
            v.extend(gpu.download(&s.sums, 33 * width / crate::mma::GROUP)?);
            Ok(v)
        };
        bits.add(compare_bits(&parts(&sx)?, &parts(&want)?));
    }
    out.cases.push(CaseResult {
        op: "rms_norm_gated".into(),
        case: format!(
            "width {width}, {groups} groups, z strided{}",
            if wide {
                "; wide over 3 blocks a group, its split"
            } else {
                ""
            }
        ),
        verdict: bits.gate(v, "the CPU kernel's bits"),
        cpu_bits: Some(bits),
    });
    Ok(())
}
