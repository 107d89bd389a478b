//! Muse Spark's mixture of experts: a float32 sigmoid top-k router with a score bias and routed
//! scaling, experts at a compressed width between two projections, and a post-expert norm folded
//! into the weighted combine.
//!
//! Per row (all f32):
//! - `x_e = logit_e * multiplier`; `score_e = sigmoid(x_e)` as `y = 1 / (1 + exp(|x|))`,
//!   `score = x < 0 ? y : 1 - y` (the contract `exp`); `biased_e = score_e + bias_e`.
//! - Top-k by `biased`, ties to the lower expert id; picks in descending order.
//! - `total = s_{k-1} + (... + (s_0 + 0))` over the picks' unbiased scores in pick order;
//!   `w_k = s_k / (total + 1e-15) * routed_scaling`.
//! - `c = rms_norm(pre_expert_proj(x), pre_expert_gain)`; per pick `d_k = down(silu(gate c) * up c)`.
//! - Combine, picks in order from `acc = 0`: `v = d_k * post_expert_gain` (input scale),
//!   `acc = acc + (v * inv_rms(v)) * w_k`; then `post_expert_proj(acc)`.
//!
//! Rows are grouped by expert for the matmuls; the matmul is row-invariant, so a row's result is
//! the same whatever else shares its expert.

use super::weights::LayerWeights;
use crate::error::ModelError;
use tf_kernels::matmul::matmul;
use tf_kernels::ops::{exp, rms_norm, silu_mul};
use tf_kernels::pool::Pool;

/// Added to the sum of the picked scores.
const SCORE_EPS: f32 = 1e-15;

/// The router's settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Routing {
    pub top_k: usize,
    pub multiplier: f32,
    pub scale: f32,
}

/// One row's picks: expert ids (descending biased score) and their weights; also the margin
/// between the k-th and (k+1)-th biased scores.
#[derive(Debug, Clone, PartialEq)]
pub struct Picks {
    /// Expert ids in pick order.
    pub experts: Vec<usize>,
    /// Combine weights in pick order.
    pub weights: Vec<f32>,
    /// `biased[k-th] - biased[(k+1)-th]` (infinite when every expert is picked).
    pub margin: f32,
}

/// The sigmoid of the router: `1 / (1 + exp(|x|))` mirrored for positive `x`.
fn score(x: f32) -> f32 {
    let y = 1.0 / (1.0 + exp(x.abs()));
    if x < 0.0 {
        y
    } else {
        1.0 - y
    }
}

/// Picks the top-k experts of one row of router logits.
pub(crate) fn route(logits: &[f32], bias: &[f32], r: &Routing) -> Picks {
    let scores: Vec<f32> = logits.iter().map(|&l| score(l * r.multiplier)).collect();
    let mut biased: Vec<f32> = scores.iter().zip(bias).map(|(s, b)| s + b).collect();
    let mut experts = Vec::with_capacity(r.top_k);
    let mut picked = Vec::with_capacity(r.top_k);
    let best = |biased: &[f32]| -> Option<usize> {
        let mut at: Option<usize> = None;
        for (e, &v) in biased.iter().enumerate() {
            // Strictly greater keeps the lower id on ties; NaN never wins.
            if !v.is_nan() && at.is_none_or(|a| v > biased[a]) {
                at = Some(e);
            }
        }
        at
    };
    let mut last = f32::NEG_INFINITY;
    for _ in 0..r.top_k {
        let Some(e) = best(&biased) else { break };
        last = biased[e];
        experts.push(e);
        picked.push(scores[e]);
        biased[e] = f32::NEG_INFINITY;
    }
    let margin = match best(&biased) {
        Some(e) if biased[e] > f32::NEG_INFINITY => last - biased[e],
        _ => f32::INFINITY,
    };
    let mut total = 0.0f32;
    for &s in &picked {
        total += s; // s + total: addition commutes, the order of picks is fixed
    }
    let weights = picked
        .iter()
        .map(|s| s / (total + SCORE_EPS) * r.scale)
        .collect();
    Picks {
        experts,
        weights,
        margin,
    }
}

/// Buffers of the MoE, reused across rounds.
#[derive(Default)]
pub(crate) struct MoeScratch {
    logits: Vec<f32>,
    compressed: Vec<f32>,
    normed: Vec<f32>,
    gathered: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    act: Vec<f32>,
    down: Vec<f32>,
    outs: Vec<f32>,
    combined: Vec<f32>,
    ones: Vec<f32>,
    v: Vec<f32>,
    pub picks: Vec<Picks>,
}

fn sized(buf: &mut Vec<f32>, len: usize) -> &mut [f32] {
    buf.resize(len, 0.0);
    &mut buf[..len]
}

/// The MoE branch of `n` rows of `x` (`[n, hidden]`) into `out` (`[n, hidden]`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn moe(
    l: &LayerWeights,
    x: &[f32],
    n: usize,
    routing: &Routing,
    eps: f32,
    post_eps: f32,
    out: &mut [f32],
    s: &mut MoeScratch,
    pool: &Pool,
) -> Result<(), ModelError> {
    let experts = l.router.rows();
    let c = l.pre_expert_proj.rows();
    let inter = l.experts.first().map_or(0, |e| e.gate.rows());
    let k = routing.top_k;

    let logits = sized(&mut s.logits, n * experts);
    matmul(&l.router, x, n, logits, pool)?;
    s.picks.clear();
    for row in logits.chunks_exact(experts) {
        s.picks.push(route(row, &l.router_bias, routing));
    }

    let comp = sized(&mut s.compressed, n * c);
    matmul(&l.pre_expert_proj, x, n, comp, pool)?;
    let normed = sized(&mut s.normed, n * c);
    rms_norm(comp, &l.pre_expert_gain, eps, n, normed)?;

    // Expert outputs, one slot per (row, pick).
    let outs = sized(&mut s.outs, n * k * c);
    for (e, ex) in l.experts.iter().enumerate() {
        let slots: Vec<(usize, usize)> = s
            .picks
            .iter()
            .enumerate()
            .flat_map(|(i, p)| {
                p.experts
                    .iter()
                    .enumerate()
                    .filter(move |(_, &pe)| pe == e)
                    .map(move |(j, _)| (i, j))
            })
            .collect();
        let m = slots.len();
        if m == 0 {
            continue;
        }
        let g_in = sized(&mut s.gathered, m * c);
        for (row, &(i, _)) in g_in.chunks_exact_mut(c).zip(&slots) {
            row.copy_from_slice(&s.normed[i * c..(i + 1) * c]);
        }
        let gate = sized(&mut s.gate, m * inter);
        matmul(&ex.gate, g_in, m, gate, pool)?;
        let up = sized(&mut s.up, m * inter);
        matmul(&ex.up, g_in, m, up, pool)?;
        let act = sized(&mut s.act, m * inter);
        silu_mul(gate, up, act)?;
        let down = sized(&mut s.down, m * c);
        matmul(&ex.down, act, m, down, pool)?;
        for (row, &(i, j)) in down.chunks_exact(c).zip(&slots) {
            outs[(i * k + j) * c..(i * k + j + 1) * c].copy_from_slice(row);
        }
    }

    // Post-expert norm (gain as input scale) and the weighted combine, picks in order.
    if s.ones.len() != c {
        s.ones = vec![1.0; c];
    }
    let combined = sized(&mut s.combined, n * c);
    let v = sized(&mut s.v, 2 * c);
    let (v, nv) = v.split_at_mut(c);
    for (i, (acc, p)) in combined.chunks_exact_mut(c).zip(&s.picks).enumerate() {
        acc.fill(0.0);
        for (j, &w) in p.weights.iter().enumerate() {
            let d = &outs[(i * k + j) * c..(i * k + j + 1) * c];
            for ((vv, &dd), &g) in v.iter_mut().zip(d).zip(&l.post_expert_gain) {
                *vv = dd * g;
            }
            rms_norm(v, &s.ones, post_eps, 1, nv)?;
            for (a, &x) in acc.iter_mut().zip(nv.iter()) {
                *a += x * w;
            }
        }
    }
    matmul(&l.post_expert_proj, combined, n, out, pool)?;
    Ok(())
}
