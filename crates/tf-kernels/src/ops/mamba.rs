//! The Mamba2 recurrent step: causal depthwise conv1d and the selective-state (SSM) update,
//! one token of one stream at a time.
//!
//! Prefill, decode and verify all advance a stream's state through [`mamba_step`], one token
//! after another in position order, so a stream's outputs do not depend on how its tokens were
//! grouped into rounds (DESIGN.md: "recurrent state advances token by token with one routine").
//!
//! Arithmetic (all f32, every operation rounded as written):
//! - conv: window = `[state (oldest first)…, x]`; `acc = 0`; for `k` ascending
//!   `acc = fma(w[c][k], window[k][c], acc)`; then `acc + bias[c]`; then `silu` (the contract's).
//!   The state then drops its oldest column and appends `x`.
//! - dt: `softplus(dt_raw + dt_bias)` (evaluated in f64 as `max(v, 0) + ln_1p(exp(-|v|))`, rounded
//!   once), clamped to `[dt_min, dt_max]`.
//! - per head `h` (group `g = h / (heads / groups)`): `dA = exp(dt * a[h])` (the contract's exp,
//!   `a = -exp(A_log)` precomputed), `dtx = dt * x[p]`, for each state element
//!   `s = dA * s + dtx * B[g][n]`; `y[p] = dot(s[p], C[g])` (16-lane order), then `y + x[p] * D[h]`.

use super::activation::{exp, silu};
use super::error::{check_len, OpError};
use super::simd::{self, Isa};

/// One Mamba2 mixer's shape and per-head constants, borrowed from the loaded weights.
#[derive(Debug, Clone, Copy)]
pub struct MambaParams<'a> {
    /// SSM heads.
    pub n_heads: usize,
    /// Channels per head.
    pub head_dim: usize,
    /// B/C groups (divides `n_heads`).
    pub n_groups: usize,
    /// State size per group.
    pub state_size: usize,
    /// Conv kernel width (>= 1).
    pub conv_kernel: usize,
    /// Depthwise conv weight `[conv_dim][conv_kernel]` (the last tap multiplies the newest input).
    pub conv_weight: &'a [f32],
    /// Conv bias `[conv_dim]`, if any.
    pub conv_bias: Option<&'a [f32]>,
    /// `-exp(A_log)` per head.
    pub a: &'a [f32],
    /// Skip coefficient per head.
    pub d: &'a [f32],
    /// Added to dt before softplus, per head.
    pub dt_bias: &'a [f32],
    /// Clamp of dt after softplus (`time_step_limit`); the max may be `+inf`.
    pub dt_limit: (f32, f32),
}

impl MambaParams<'_> {
    /// Width of the SSM input/output (heads × head_dim).
    pub fn inner(&self) -> usize {
        self.n_heads * self.head_dim
    }
    /// Channels through the conv: x, B and C.
    pub fn conv_dim(&self) -> usize {
        self.inner() + 2 * self.n_groups * self.state_size
    }
    /// Floats of one stream's conv state: `(conv_kernel - 1) × conv_dim`.
    pub fn conv_state_len(&self) -> usize {
        self.conv_kernel.saturating_sub(1) * self.conv_dim()
    }
    /// Floats of one stream's SSM state: `heads × head_dim × state_size`.
    pub fn ssm_state_len(&self) -> usize {
        self.inner() * self.state_size
    }

    /// Checks every buffer length against the shape.
    pub fn validate(&self) -> Result<(), OpError> {
        const OP: &str = "mamba_step";
        if self.n_heads == 0
            || self.head_dim == 0
            || self.state_size == 0
            || self.conv_kernel == 0
            || self.n_groups == 0
            || !self.n_heads.is_multiple_of(self.n_groups)
        {
            return Err(OpError::Shape {
                op: OP,
                detail: format!(
                    "heads {} head_dim {} groups {} state {} kernel {}: all positive, groups dividing heads",
                    self.n_heads, self.head_dim, self.n_groups, self.state_size, self.conv_kernel
                ),
            });
        }
        check_len(
            OP,
            "conv_weight",
            self.conv_dim() * self.conv_kernel,
            self.conv_weight.len(),
        )?;
        if let Some(b) = self.conv_bias {
            check_len(OP, "conv_bias", self.conv_dim(), b.len())?;
        }
        check_len(OP, "a", self.n_heads, self.a.len())?;
        check_len(OP, "d", self.n_heads, self.d.len())?;
        check_len(OP, "dt_bias", self.n_heads, self.dt_bias.len())?;
        let (lo, hi) = self.dt_limit;
        if lo.is_nan() || hi.is_nan() || lo > hi {
            return Err(OpError::Param {
                op: OP,
                param: "dt_limit",
                value: lo as f64,
                why: "must be an ordered [min, max] pair",
            });
        }
        Ok(())
    }
}

/// One stream's recurrent state for one Mamba2 layer.
#[derive(Debug, Clone, PartialEq)]
pub struct MambaState {
    /// The last `conv_kernel - 1` conv inputs, oldest first, `[conv_kernel - 1][conv_dim]`.
    pub conv: Vec<f32>,
    /// SSM state `[heads][head_dim][state_size]`.
    pub ssm: Vec<f32>,
}

impl MambaState {
    /// A zero state (the start of a stream) for a mixer of shape `p`.
    pub fn new(p: &MambaParams) -> MambaState {
        MambaState {
            conv: vec![0.0; p.conv_state_len()],
            ssm: vec![0.0; p.ssm_state_len()],
        }
    }
    /// Resets to the start of a stream.
    pub fn clear(&mut self) {
        self.conv.fill(0.0);
        self.ssm.fill(0.0);
    }
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        (self.conv.len() + self.ssm.len()) * 4
    }
}

/// `softplus(v) = ln(1 + e^v)`, evaluated in f64 as `max(v, 0) + ln_1p(exp(-|v|))` and rounded once.
pub fn softplus(v: f32) -> f32 {
    let v = v as f64;
    (v.max(0.0) + (-v.abs()).exp().ln_1p()) as f32
}

/// The causal depthwise conv of one token: reads `x` (`[conv_dim]`), writes
/// `silu(conv + bias)` to `out`, and advances `state`.
pub fn conv1d_step(
    p: &MambaParams,
    state: &mut [f32],
    x: &[f32],
    out: &mut [f32],
) -> Result<(), OpError> {
    const OP: &str = "conv1d_step";
    p.validate()?;
    let (cd, k) = (p.conv_dim(), p.conv_kernel);
    check_len(OP, "state", p.conv_state_len(), state.len())?;
    check_len(OP, "x", cd, x.len())?;
    check_len(OP, "out", cd, out.len())?;
    for c in 0..cd {
        let w = &p.conv_weight[c * k..(c + 1) * k];
        let mut acc = 0.0f32;
        for (t, &wt) in w[..k - 1].iter().enumerate() {
            acc = wt.mul_add(state[t * cd + c], acc);
        }
        acc = w[k - 1].mul_add(x[c], acc);
        if let Some(b) = p.conv_bias {
            acc += b[c];
        }
        out[c] = silu(acc);
    }
    if k > 1 {
        state.copy_within(cd.., 0);
        state[(k - 2) * cd..].copy_from_slice(x);
    }
    Ok(())
}

/// The SSM update of one token: `xbc` is the conv output `[x | B | C]`, `dt_raw` the
/// projection's dt `[heads]`; writes `y` (`[heads × head_dim]`, D skip included) and advances
/// `ssm` (`[heads][head_dim][state]`).
pub fn ssm_step(
    p: &MambaParams,
    ssm: &mut [f32],
    xbc: &[f32],
    dt_raw: &[f32],
    y: &mut [f32],
) -> Result<(), OpError> {
    const OP: &str = "ssm_step";
    p.validate()?;
    let (nh, hd, ns, ng) = (p.n_heads, p.head_dim, p.state_size, p.n_groups);
    let inner = p.inner();
    check_len(OP, "ssm", p.ssm_state_len(), ssm.len())?;
    check_len(OP, "xbc", p.conv_dim(), xbc.len())?;
    check_len(OP, "dt_raw", nh, dt_raw.len())?;
    check_len(OP, "y", inner, y.len())?;
    let isa = Isa::active();
    let (x, bc) = xbc.split_at(inner);
    let (b, c) = bc.split_at(ng * ns);
    let heads_per_group = nh / ng;
    for h in 0..nh {
        let g = h / heads_per_group;
        let (bg, cg) = (&b[g * ns..(g + 1) * ns], &c[g * ns..(g + 1) * ns]);
        let dt = softplus(dt_raw[h] + p.dt_bias[h])
            .max(p.dt_limit.0)
            .min(p.dt_limit.1);
        let da = exp(dt * p.a[h]);
        for i in 0..hd {
            let xi = x[h * hd + i];
            let dtx = dt * xi;
            let s = &mut ssm[(h * hd + i) * ns..(h * hd + i + 1) * ns];
            for (sv, &bv) in s.iter_mut().zip(bg) {
                *sv = da * *sv + dtx * bv;
            }
            let acc = simd::dot(isa, s, cg);
            y[h * hd + i] = acc + xi * p.d[h];
        }
    }
    Ok(())
}

/// One token of one stream through the whole recurrent part of a Mamba2 mixer: the conv on
/// `conv_in` (`[conv_dim]`, into `conv_out` scratch), then the SSM step writing `y`.
pub fn mamba_step(
    p: &MambaParams,
    state: &mut MambaState,
    conv_in: &[f32],
    dt_raw: &[f32],
    conv_out: &mut [f32],
    y: &mut [f32],
) -> Result<(), OpError> {
    conv1d_step(p, &mut state.conv, conv_in, conv_out)?;
    ssm_step(p, &mut state.ssm, conv_out, dt_raw, y)
}
