//! Kernel contract for the Mamba2 recurrent step (conv1d + SSM) with planted controls, and the
//! recurrence over a whole sequence against an f64 reference.

use tf_kernels::contract::{
    assert_catches, assert_contract, CheckConfig, Failure, Rng, RowOp, Tolerance,
};
use tf_kernels::ops::{exp, mamba_step, softplus, MambaParams, MambaState};

/// Owned constants of one mixer shape.
struct Consts {
    heads: usize,
    head_dim: usize,
    groups: usize,
    state: usize,
    kernel: usize,
    conv_weight: Vec<f32>,
    conv_bias: Option<Vec<f32>>,
    a: Vec<f32>,
    d: Vec<f32>,
    dt_bias: Vec<f32>,
    dt_limit: (f32, f32),
}

impl Consts {
    #[allow(clippy::too_many_arguments)]
    fn new(
        seed: u64,
        heads: usize,
        head_dim: usize,
        groups: usize,
        state: usize,
        kernel: usize,
        bias: bool,
        dt_limit: (f32, f32),
    ) -> Consts {
        let mut r = Rng::new(seed);
        let conv_dim = heads * head_dim + 2 * groups * state;
        Consts {
            heads,
            head_dim,
            groups,
            state,
            kernel,
            conv_weight: r.vec_normal(conv_dim * kernel, 0.5),
            conv_bias: bias.then(|| r.vec_normal(conv_dim, 0.1)),
            a: (0..heads).map(|_| -exp(r.uniform(0.0, 2.0))).collect(),
            d: (0..heads).map(|_| 1.0 + 0.3 * r.normal()).collect(),
            dt_bias: (0..heads).map(|_| -1.0 + 0.7 * r.normal()).collect(),
            dt_limit,
        }
    }

    fn params(&self) -> MambaParams<'_> {
        MambaParams {
            n_heads: self.heads,
            head_dim: self.head_dim,
            n_groups: self.groups,
            state_size: self.state,
            conv_kernel: self.kernel,
            conv_weight: &self.conv_weight,
            conv_bias: self.conv_bias.as_deref(),
            a: &self.a,
            d: &self.d,
            dt_bias: &self.dt_bias,
            dt_limit: self.dt_limit,
        }
    }
}

/// One row: a stream's state before the token, the token's conv input and raw dt.
#[derive(Clone)]
struct StepRow {
    state: MambaState,
    conv_in: Vec<f32>,
    dt: Vec<f32>,
}

/// f64 reference of one step; returns (y, new conv state, new ssm state) concatenated.
fn reference_step(c: &Consts, row: &StepRow, out: &mut [f64]) {
    let p = c.params();
    let (cd, k, inner) = (p.conv_dim(), c.kernel, p.inner());
    let st = &row.state;
    let mut xbc = vec![0f64; cd];
    for ch in 0..cd {
        let mut acc = 0f64;
        for t in 0..k {
            let v = if t + 1 == k {
                row.conv_in[ch]
            } else {
                st.conv[t * cd + ch]
            };
            acc += c.conv_weight[ch * k + t] as f64 * v as f64;
        }
        if let Some(b) = &c.conv_bias {
            acc += b[ch] as f64;
        }
        xbc[ch] = acc / (1.0 + (-acc).exp());
    }
    let (x, bc) = xbc.split_at(inner);
    let (b, cm) = bc.split_at(c.groups * c.state);
    let ns = c.state;
    let mut ssm: Vec<f64> = st.ssm.iter().map(|&v| v as f64).collect();
    for h in 0..c.heads {
        let g = h / (c.heads / c.groups);
        let v = row.dt[h] as f64 + c.dt_bias[h] as f64;
        let dt =
            (v.max(0.0) + (-v.abs()).exp().ln_1p()).clamp(c.dt_limit.0 as f64, c.dt_limit.1 as f64);
        let da = (dt * c.a[h] as f64).exp();
        for i in 0..c.head_dim {
            let xi = x[h * c.head_dim + i];
            let mut y = 0f64;
            for n in 0..ns {
                let s = &mut ssm[(h * c.head_dim + i) * ns + n];
                *s = da * *s + dt * xi * b[g * ns + n];
                y += *s * cm[g * ns + n];
            }
            out[h * c.head_dim + i] = y + xi * c.d[h] as f64;
        }
    }
    let mut conv: Vec<f64> = st.conv.iter().map(|&v| v as f64).collect();
    if k > 1 {
        conv.drain(..cd);
        conv.extend(row.conv_in.iter().map(|&v| v as f64));
    }
    out[inner..inner + conv.len()].copy_from_slice(&conv);
    out[inner + conv.len()..].copy_from_slice(&ssm);
}

fn gen_row(c: &Consts, r: &mut Rng) -> StepRow {
    let p = c.params();
    StepRow {
        state: MambaState {
            conv: r.vec_normal(p.conv_state_len(), 1.0),
            ssm: r.vec_normal(p.ssm_state_len(), 0.5),
        },
        conv_in: r.vec_normal(p.conv_dim(), 1.0),
        dt: r.vec_normal(c.heads, 1.5),
    }
}

/// The fast path: every row advances its own copy of its state.
fn run_with(p: &MambaParams, rows: &[StepRow], out: &mut [f32]) {
    let w = p.inner() + p.conv_state_len() + p.ssm_state_len();
    let mut conv = vec![0f32; p.conv_dim()];
    for (row, o) in rows.iter().zip(out.chunks_exact_mut(w)) {
        let mut st = row.state.clone();
        let (y, rest) = o.split_at_mut(p.inner());
        mamba_step(p, &mut st, &row.conv_in, &row.dt, &mut conv, y).unwrap();
        rest[..st.conv.len()].copy_from_slice(&st.conv);
        rest[st.conv.len()..].copy_from_slice(&st.ssm);
    }
}

const TOL: Tolerance = Tolerance::new(2e-5, 2e-5);

fn contract_for(c: &Consts, quick: bool) {
    let p = c.params();
    let width = p.inner() + p.conv_state_len() + p.ssm_state_len();
    let gen = |r: &mut Rng, _i: usize| gen_row(c, r);
    let reference = |row: &StepRow, out: &mut [f64]| reference_step(c, row, out);
    let op = RowOp {
        name: "mamba_step",
        out_width: width,
        tolerance: TOL,
        gen_row: &gen,
        reference: &reference,
    };
    let run = |rows: &[StepRow], out: &mut [f32]| run_with(&p, rows, out);
    let cfg = if quick {
        CheckConfig::quick()
    } else {
        CheckConfig::default()
    };
    assert_contract(&op, &run, &cfg);
}

#[test]
fn mamba_step_contract_fixture_and_odd_shapes() {
    // The fixtures' shapes, an odd one (state 7, head_dim 5, kernel 2), and kernel 1 (no conv
    // state), with and without a conv bias and a finite dt clamp.
    contract_for(
        &Consts::new(1, 8, 16, 2, 16, 4, true, (0.0, f32::INFINITY)),
        false,
    );
    contract_for(&Consts::new(2, 4, 16, 1, 8, 3, false, (0.05, 0.8)), false);
    contract_for(&Consts::new(3, 6, 5, 3, 7, 2, true, (0.001, 100.0)), true);
    contract_for(
        &Consts::new(4, 2, 4, 1, 16, 1, false, (0.0, f32::INFINITY)),
        true,
    );
}

#[test]
fn planted_mamba_controls_are_caught() {
    let c = Consts::new(5, 4, 16, 2, 16, 4, true, (0.05, 0.8));
    let p = c.params();
    let width = p.inner() + p.conv_state_len() + p.ssm_state_len();
    let gen = |r: &mut Rng, _i: usize| gen_row(&c, r);
    let reference = |row: &StepRow, out: &mut [f64]| reference_step(&c, row, out);
    let op = RowOp {
        name: "mamba_step",
        out_width: width,
        tolerance: TOL,
        gen_row: &gen,
        reference: &reference,
    };
    let cfg = CheckConfig::quick();
    // dt_bias ignored.
    let zeros = vec![0.0; c.heads];
    let no_bias = MambaParams {
        dt_bias: &zeros,
        ..p
    };
    let f = assert_catches(
        &op,
        &|rows: &[StepRow], out: &mut [f32]| run_with(&no_bias, rows, out),
        &cfg,
    );
    assert!(matches!(f, Failure::Accuracy { .. }), "{f:?}");
    // dt not clamped to time_step_limit.
    let unclamped = MambaParams {
        dt_limit: (0.0, f32::INFINITY),
        ..p
    };
    let f = assert_catches(
        &op,
        &|rows: &[StepRow], out: &mut [f32]| run_with(&unclamped, rows, out),
        &cfg,
    );
    assert!(matches!(f, Failure::Accuracy { .. }), "{f:?}");
    // Conv taps reversed (the oldest input multiplied by the newest tap).
    let kk = c.kernel;
    let reversed: Vec<f32> = c
        .conv_weight
        .chunks_exact(kk)
        .flat_map(|w| w.iter().rev().copied())
        .collect();
    let rev = MambaParams {
        conv_weight: &reversed,
        ..p
    };
    let f = assert_catches(
        &op,
        &|rows: &[StepRow], out: &mut [f32]| run_with(&rev, rows, out),
        &cfg,
    );
    assert!(matches!(f, Failure::Accuracy { .. }), "{f:?}");
    // Heads reading the other group's B and C.
    let wrong_group = |rows: &[StepRow], out: &mut [f32]| {
        let mut swapped = rows.to_vec();
        for row in &mut swapped {
            let (inner, gs) = (p.inner(), c.groups * c.state);
            let (b, cm) = row.conv_in[inner..].split_at_mut(gs);
            b.rotate_left(c.state);
            cm.rotate_left(c.state);
        }
        run_with(&p, &swapped, out);
    };
    let f = assert_catches(&op, &wrong_group, &cfg);
    assert!(matches!(f, Failure::Accuracy { .. }), "{f:?}");
    // A batch-dependent path: the SSM state of every other row advanced twice when N > 1.
    let varying = |rows: &[StepRow], out: &mut [f32]| {
        run_with(&p, rows, out);
        if rows.len() > 1 {
            for o in out.chunks_exact_mut(width).skip(1).step_by(2) {
                o[0] = f32::from_bits(o[0].to_bits() ^ 1);
            }
        }
    };
    let f = assert_catches(&op, &varying, &cfg);
    assert!(matches!(f, Failure::RowVariance { .. }), "{f:?}");
}

#[test]
fn a_sequence_stepped_token_by_token_matches_the_f64_recurrence() {
    let c = Consts::new(9, 4, 8, 2, 16, 4, true, (0.01, 2.0));
    let p = c.params();
    let mut r = Rng::new(77);
    let mut st = MambaState::new(&p);
    let mut st64 = StepRow {
        state: MambaState::new(&p),
        conv_in: vec![],
        dt: vec![],
    };
    let mut conv = vec![0f32; p.conv_dim()];
    let mut y = vec![0f32; p.inner()];
    let width = p.inner() + p.conv_state_len() + p.ssm_state_len();
    let mut want = vec![0f64; width];
    let mut worst = 0f64;
    for _ in 0..200 {
        let conv_in = r.vec_normal(p.conv_dim(), 1.0);
        let dt = r.vec_normal(c.heads, 1.0);
        mamba_step(&p, &mut st, &conv_in, &dt, &mut conv, &mut y).unwrap();
        st64.conv_in = conv_in;
        st64.dt = dt;
        reference_step(&c, &st64, &mut want);
        for (g, w) in y.iter().zip(&want) {
            worst = worst.max((*g as f64 - w).abs() / (1.0 + w.abs()));
        }
        // The reference continues from its own (f32-rounded) state: compare one step at a time.
        st64.state = st.clone();
    }
    assert!(worst < 1e-5, "worst relative error {worst:e}");
}

#[test]
fn softplus_is_ln_one_plus_exp() {
    for &v in &[-30.0f32, -5.0, -1.0, -1e-3, 0.0, 1e-3, 0.5, 3.0, 20.0, 50.0] {
        let want = (v as f64).exp().ln_1p();
        let got = softplus(v) as f64;
        assert!(
            (got - want).abs() <= 1e-7 * want.abs().max(1e-30),
            "{v}: {got} vs {want}"
        );
    }
    assert_eq!(softplus(100.0), 100.0);
}

#[test]
fn bad_shapes_are_named_errors() {
    let c = Consts::new(1, 4, 4, 3, 4, 2, false, (0.0, 1.0));
    let p = c.params();
    assert!(p.validate().is_err(), "3 groups do not divide 4 heads");
    let c = Consts::new(1, 4, 4, 2, 4, 2, false, (1.0, 0.5));
    assert!(c.params().validate().is_err(), "dt_limit min > max");
    let c = Consts::new(1, 4, 4, 2, 4, 2, false, (0.0, 1.0));
    let p = c.params();
    let mut st = MambaState::new(&p);
    let mut conv = vec![0f32; p.conv_dim()];
    let mut y = vec![0f32; p.inner()];
    let short = vec![0f32; p.conv_dim() - 1];
    assert!(mamba_step(&p, &mut st, &short, &[0.0; 4], &mut conv, &mut y).is_err());
}
