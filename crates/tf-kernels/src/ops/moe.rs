//! Mixture-of-experts routing (sigmoid router with a score-correction bias, grouped top-k) and
//! the combine of the picked experts' outputs, one row at a time.
//!
//! Arithmetic of [`route`] for one row of router logits (all f32):
//! 1. `p[e] = 1 / (1 + exp(-logit[e]))` (the contract's exp, one division);
//! 2. `s[e] = p[e] + correction[e]` (selection scores only);
//! 3. grouped routing (`n_group > 1`): a group's score is the sum of its two largest `s`
//!    (larger first); the `topk_group` best groups are kept (ties: the lower group id); the
//!    other groups' `s` become `0.0` ([`DroppedGroups::Zero`], mlx-lm) or `-inf`
//!    ([`DroppedGroups::NegInf`], transformers) — they differ only when a kept expert's `s <= 0`;
//! 4. the `top_k` largest `s` are picked, in descending order, ties by the lower expert id:
//!    that is the pick order used everywhere after;
//! 5. weights are `p` (not `s`) of the picks; with `norm_topk_prob` and `top_k > 1`,
//!    `w = p / (sum + 1e-20)` with `sum` accumulated in pick order; then `w * scaling`.
//!
//! [`combine`] adds `w_j * y_j` over the picks in pick order (each product rounded, then added),
//! starting from zero.

use super::activation::exp;
use super::error::{check_len, OpError};

/// What grouped routing writes into the scores of dropped groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DroppedGroups {
    /// `0.0`: mlx-lm's `group_expert_select` (the reference this project is held against).
    Zero,
    /// `-inf`: transformers' `NemotronHTopkRouter` (a dropped expert can never be picked).
    NegInf,
}

/// One MoE layer's routing parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RouteParams {
    /// Routed experts (router logits per row).
    pub n_experts: usize,
    /// Experts picked per row.
    pub top_k: usize,
    /// Expert groups (1 = no grouping); divides `n_experts`.
    pub n_group: usize,
    /// Groups kept per row when grouping.
    pub topk_group: usize,
    /// Multiplier on the final weights (`routed_scaling_factor`).
    pub scaling: f32,
    /// Renormalise the picked weights to sum to one (only when `top_k > 1`).
    pub norm_topk_prob: bool,
    /// Dropped-group semantics.
    pub dropped: DroppedGroups,
}

impl RouteParams {
    /// Checks the parameters are consistent.
    pub fn validate(&self) -> Result<(), OpError> {
        let bad = |detail: String| OpError::Shape {
            op: "route",
            detail,
        };
        if self.n_experts == 0 || self.top_k == 0 || self.top_k > self.n_experts {
            return Err(bad(format!(
                "top_k {} must be in 1..={} (n_experts)",
                self.top_k, self.n_experts
            )));
        }
        if self.n_group == 0 || !self.n_experts.is_multiple_of(self.n_group) {
            return Err(bad(format!(
                "n_group {} must divide n_experts {}",
                self.n_group, self.n_experts
            )));
        }
        if self.n_group > 1 {
            let per = self.n_experts / self.n_group;
            if per < 2
                || self.topk_group == 0
                || self.topk_group > self.n_group
                || self.top_k > self.topk_group * per
            {
                return Err(bad(format!(
                    "grouped routing: {} groups of {per}, keeping {}, cannot pick top-{}",
                    self.n_group, self.topk_group, self.top_k
                )));
            }
        }
        Ok(())
    }
}

/// One picked expert and its combine weight.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pick {
    /// Expert id.
    pub expert: u32,
    /// Combine weight (after normalisation and scaling).
    pub weight: f32,
}

/// Reusable buffers of [`route`].
#[derive(Debug, Default, Clone)]
pub struct RouteScratch {
    probs: Vec<f32>,
    scores: Vec<f32>,
    groups: Vec<(f32, usize)>,
}

/// The contract's sigmoid: `1 / (1 + exp(-x))`.
#[inline]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

/// Whether `(a, ia)` ranks before `(b, ib)`: larger score first, then the lower id. NaN ranks last.
#[inline]
fn ranks_before(a: f32, ia: usize, b: f32, ib: usize) -> bool {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => ia < ib,
        (true, false) => false,
        (false, true) => true,
        _ => a > b || (a == b && ia < ib),
    }
}

/// Routes one row of router logits: writes `top_k` picks to `picks`, in pick order.
pub fn route(
    logits: &[f32],
    correction: &[f32],
    p: &RouteParams,
    scratch: &mut RouteScratch,
    picks: &mut [Pick],
) -> Result<(), OpError> {
    p.validate()?;
    let n = p.n_experts;
    check_len("route", "logits", n, logits.len())?;
    check_len("route", "correction", n, correction.len())?;
    check_len("route", "picks", p.top_k, picks.len())?;
    let RouteScratch {
        probs,
        scores,
        groups,
    } = scratch;
    probs.clear();
    probs.extend(logits.iter().map(|&x| sigmoid(x)));
    scores.clear();
    scores.extend(probs.iter().zip(correction).map(|(&q, &c)| q + c));
    if p.n_group > 1 {
        let per = n / p.n_group;
        groups.clear();
        for (g, s) in scores.chunks_exact(per).enumerate() {
            let (mut a, mut ia) = (s[0], 0);
            for (i, &v) in s.iter().enumerate().skip(1) {
                if ranks_before(v, i, a, ia) {
                    (a, ia) = (v, i);
                }
            }
            let mut b = f32::NAN;
            let mut ib = usize::MAX;
            for (i, &v) in s.iter().enumerate() {
                if i != ia && (ib == usize::MAX || ranks_before(v, i, b, ib)) {
                    (b, ib) = (v, i);
                }
            }
            groups.push((a + b, g));
        }
        groups.sort_by(|x, y| {
            if x.1 == y.1 {
                std::cmp::Ordering::Equal
            } else if ranks_before(x.0, x.1, y.0, y.1) {
                std::cmp::Ordering::Less
            } else {
                std::cmp::Ordering::Greater
            }
        });
        let fill = match p.dropped {
            DroppedGroups::Zero => 0.0,
            DroppedGroups::NegInf => f32::NEG_INFINITY,
        };
        for &(_, g) in &groups[p.topk_group..] {
            scores[g * per..(g + 1) * per].fill(fill);
        }
    }
    // Selection of the top_k by insertion into the sorted picks (k is small).
    let k = p.top_k;
    let mut len = 0;
    for (e, &s) in scores.iter().enumerate() {
        if len == k
            && !ranks_before(
                s,
                e,
                scores[picks[k - 1].expert as usize],
                picks[k - 1].expert as usize,
            )
        {
            continue;
        }
        let mut at = len.min(k - 1);
        if len < k {
            len += 1;
        }
        while at > 0 {
            let prev = picks[at - 1].expert as usize;
            if ranks_before(s, e, scores[prev], prev) {
                picks[at] = picks[at - 1];
                at -= 1;
            } else {
                break;
            }
        }
        picks[at] = Pick {
            expert: e as u32,
            weight: 0.0,
        };
    }
    for pk in picks.iter_mut() {
        pk.weight = probs[pk.expert as usize];
    }
    if p.norm_topk_prob && k > 1 {
        let mut sum = 0.0f32;
        for pk in picks.iter() {
            sum += pk.weight;
        }
        let denom = sum + 1e-20;
        for pk in picks.iter_mut() {
            pk.weight /= denom;
        }
    }
    for pk in picks.iter_mut() {
        pk.weight *= p.scaling;
    }
    Ok(())
}

/// `out = Σ_j picks[j].weight * outs[j]` over the picks in order (`outs` is `[top_k][width]`).
pub fn combine(picks: &[Pick], outs: &[f32], out: &mut [f32]) -> Result<(), OpError> {
    let w = out.len();
    check_len("combine", "outs", picks.len() * w, outs.len())?;
    out.fill(0.0);
    for (pk, y) in picks.iter().zip(outs.chunks_exact(w.max(1))) {
        for (o, &v) in out.iter_mut().zip(y) {
            *o += pk.weight * v;
        }
    }
    Ok(())
}
