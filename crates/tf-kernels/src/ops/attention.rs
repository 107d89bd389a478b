//! Attention of one query row over its own stream's KV cache (grouped-query, causal, optional
//! sliding window and logit softcap).
//!
//! Arithmetic per query head `h` (KV head `h / (n_heads / n_kv_heads)`), keys `lo..=q_pos` in
//! ascending absolute position (`lo = q_pos + 1 - window` with a window, else 0):
//! 1. `s_j = dot(q_h, k_j) * scale` (16-lane dot, then one multiply); with a softcap
//!    `s_j = cap * tanh(s_j / cap)`, tanh evaluated in f64 and rounded.
//! 2. `m = max_j s_j`; `p_j = exp(s_j - m)` (the contract `exp`); `l = sum_j p_j` (16-lane order
//!    over `j - lo`).
//! 3. `acc[d] = fma(p_j, v_j[d], acc[d])` for `j` ascending, then `out[d] = acc[d] / l`.
//!
//! Every step depends only on this row, its position and its stream's cache: never on the number
//! of rows in the call or on other streams.

use super::error::{check_len, OpError};
use super::kv::LayerKv;
use super::simd::{self, Isa};

/// Shape and options of one attention layer.
#[derive(Clone, Debug, PartialEq)]
pub struct AttnParams {
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads (divides `n_heads`).
    pub n_kv_heads: usize,
    /// Elements per head (queries, keys and values).
    pub head_dim: usize,
    /// Multiplier on `q . k` (usually `1 / sqrt(head_dim)`).
    pub scale: f32,
    /// Sliding window: only keys with `pos > q_pos - window` are read. `None` = full causal.
    pub window: Option<usize>,
    /// Logit softcap `cap * tanh(s / cap)` applied after scaling. `None` = off.
    pub softcap: Option<f32>,
}

impl AttnParams {
    /// Validates the shape and options.
    pub fn validate(&self) -> Result<(), OpError> {
        let (h, kv, d) = (self.n_heads, self.n_kv_heads, self.head_dim);
        if h == 0 || kv == 0 || d == 0 || h % kv != 0 {
            return Err(OpError::Shape {
                op: "attention",
                detail: format!(
                    "n_heads {h} must be a positive multiple of n_kv_heads {kv}; head_dim {d} > 0"
                ),
            });
        }
        if !self.scale.is_finite() {
            return Err(param("scale", self.scale as f64, "must be finite"));
        }
        if self.window == Some(0) {
            return Err(param("window", 0.0, "must be >= 1"));
        }
        if let Some(c) = self.softcap {
            if !(c.is_finite() && c > 0.0) {
                return Err(param("softcap", c as f64, "must be finite and > 0"));
            }
        }
        Ok(())
    }

    /// First key position a query at `q_pos` reads.
    pub fn first_key(&self, q_pos: usize) -> usize {
        match self.window {
            Some(w) => (q_pos + 1).saturating_sub(w),
            None => 0,
        }
    }
}

fn param(name: &'static str, value: f64, why: &'static str) -> OpError {
    OpError::Param {
        op: "attention",
        param: name,
        value,
        why,
    }
}

/// Reusable buffers for [`attend`]; grows to the longest key range seen.
#[derive(Clone, Debug, Default)]
pub struct AttnScratch {
    scores: Vec<f32>,
    probs: Vec<f32>,
    acc: Vec<f32>,
}

impl AttnScratch {
    /// Empty scratch.
    pub fn new() -> AttnScratch {
        AttnScratch::default()
    }
}

/// The contract's logit softcap: `cap * tanh(x / cap)`, tanh in f64 rounded to f32.
#[inline]
pub fn softcap(x: f32, cap: f32) -> f32 {
    cap * ((x / cap) as f64).tanh() as f32
}

/// Attention output for one query row at absolute position `q_pos` over `cache` (which must hold
/// keys `0..=q_pos`; keys after `q_pos` are ignored). `q_row` and `out_row` are
/// `n_heads * head_dim` long.
pub fn attend(
    q_row: &[f32],
    cache: &LayerKv,
    q_pos: usize,
    params: &AttnParams,
    out_row: &mut [f32],
    scratch: &mut AttnScratch,
) -> Result<(), OpError> {
    attend_heads(
        q_row,
        cache,
        q_pos,
        params,
        0..params.n_heads,
        out_row,
        scratch,
    )
}

/// [`attend`] for the query heads `heads` only (`out_heads` is `heads.len() * head_dim` long):
/// each head is computed exactly as in a whole-row call, so a row may be split by heads across
/// threads without changing a bit.
pub fn attend_heads(
    q_row: &[f32],
    cache: &LayerKv,
    q_pos: usize,
    params: &AttnParams,
    heads: std::ops::Range<usize>,
    out_heads: &mut [f32],
    scratch: &mut AttnScratch,
) -> Result<(), OpError> {
    params.validate()?;
    let (nh, nkv, hd) = (params.n_heads, params.n_kv_heads, params.head_dim);
    check_len("attention", "q_row", nh * hd, q_row.len())?;
    if heads.end > nh || heads.start > heads.end {
        return Err(OpError::Shape {
            op: "attention",
            detail: format!("heads {heads:?} out of 0..{nh}"),
        });
    }
    check_len("attention", "out_heads", heads.len() * hd, out_heads.len())?;
    check_len("attention", "cache n_kv_heads", nkv, cache.n_kv_heads())?;
    check_len("attention", "cache head_dim", hd, cache.head_dim())?;
    if q_pos >= cache.len() {
        return Err(OpError::PositionBeyondCache {
            q_pos,
            needed: q_pos + 1,
            cache_len: cache.len(),
        });
    }
    let isa = Isa::active();
    let lo = params.first_key(q_pos);
    let n_keys = q_pos + 1 - lo;
    let group = nh / nkv;
    let row_w = nkv * hd;
    let keys = &cache.keys()[lo * row_w..(q_pos + 1) * row_w];
    let values = &cache.values()[lo * row_w..(q_pos + 1) * row_w];
    scratch.scores.resize(n_keys, 0.0);
    scratch.probs.resize(n_keys, 0.0);
    scratch.acc.resize(hd, 0.0);
    for (h, (q, out)) in q_row[heads.start * hd..heads.end * hd]
        .chunks_exact(hd)
        .zip(out_heads.chunks_exact_mut(hd))
        .enumerate()
        .map(|(i, qo)| (heads.start + i, qo))
    {
        let kvh = h / group;
        let scale = params.scale;
        simd::dot_rows(isa, q, &keys[kvh * hd..], row_w, scale, &mut scratch.scores);
        if let Some(cap) = params.softcap {
            for s in scratch.scores.iter_mut() {
                *s = softcap(*s, cap);
            }
        }
        let m = simd::max(isa, &scratch.scores);
        simd::exp_shifted(isa, &scratch.scores, m, &mut scratch.probs);
        let l = simd::sum(isa, &scratch.probs);
        scratch.acc.fill(0.0);
        simd::axpy_rows(
            isa,
            &scratch.probs,
            &values[kvh * hd..],
            row_w,
            &mut scratch.acc,
        );
        for (o, &a) in out.iter_mut().zip(&scratch.acc) {
            *o = a / l;
        }
    }
    Ok(())
}

/// One row of a batched attention call: its stream's layer cache and its absolute position.
#[derive(Clone, Copy, Debug)]
pub struct AttnRow<'a> {
    /// The row's own stream's cache for this layer.
    pub cache: &'a LayerKv,
    /// The row's absolute position.
    pub q_pos: usize,
}

/// [`attend`] for `rows.len()` query rows (`q` and `out` are `rows.len() * n_heads * head_dim`),
/// each over its own stream's cache; every row is computed exactly as alone.
pub fn attend_rows(
    q: &[f32],
    rows: &[AttnRow<'_>],
    params: &AttnParams,
    out: &mut [f32],
    scratch: &mut AttnScratch,
) -> Result<(), OpError> {
    let w = params.n_heads * params.head_dim;
    check_len("attention", "q", rows.len() * w, q.len())?;
    check_len("attention", "out", rows.len() * w, out.len())?;
    if w == 0 {
        return params.validate();
    }
    for ((qr, or), row) in q.chunks_exact(w).zip(out.chunks_exact_mut(w)).zip(rows) {
        attend(qr, row.cache, row.q_pos, params, or, scratch)?;
    }
    Ok(())
}
