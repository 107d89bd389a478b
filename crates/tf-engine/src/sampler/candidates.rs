//! The keyed draw from a row's candidates (its largest logits, selected on a device) instead of
//! the whole row: [`sample_candidates`] returns the token [`sample`](super::sample) would draw
//! from the whole row, or None when the candidates do not determine it (the caller then
//! samples the whole row). It never returns a different token.
//!
//! Inputs: the row's candidates ([`RowCandidates`]: its `C` largest non-NaN raw logits in
//! `total_cmp` order, ties by the lower id, and the row's count of non-NaN logits), and the raw
//! logits of the tokens the penalties touch ([`penalised_ids`](super::penalised_ids); more are
//! fine).
//!
//! Penalties move a token either way (a repetition penalty below 1 or a negative presence or
//! frequency penalty raises it), so they are applied to the touched tokens' raw logits and
//! merged with the untouched candidates. Let `b` be the last candidate. A token that is neither
//! a candidate nor touched keeps its raw logit, which ranks after `b`; so the merged tokens that
//! rank at or before `b` are exactly the first entries of the penalised row's sorted list (the
//! *certified prefix* P), and when the candidates are the whole row (non-NaN count <= C) every
//! merged token is (P is *complete*).
//!
//! The exact conditions, for P non-empty (else only a complete, all-NaN row is decided):
//! - Greedy (temperature <= 0): the argmax is the lowest id whose logit equals P's first
//!   (float equality, so -0 == +0), decided when P is complete or P's last logit is below its
//!   first (every tie of the maximum is then in P).
//! - Temperature > 0, P complete: the draw runs on P itself, the whole sorted row.
//! - Temperature > 0, `top_k` in 1..=|P|: the top-k cut is `P[..top_k]`; top-p and min-p
//!   normalise over the cut (the host sums over the top-k list, not the vocabulary), so the
//!   draw is the same arithmetic on the same list.
//! - Temperature > 0, `top_k` 0 or past |P|, top-p off (`!(top_p < 1)`), min-p on: min-p keeps
//!   the leading tokens whose weight `exp(l / T - l_0 / T)` reaches `min_p`; when that run ends
//!   inside P, the kept set lies in P.
//! - Anything else is refused: top-p over more than P normalises over the whole vocabulary
//!   (a sum the candidates do not hold), and a plain tempered draw is a Gumbel-max over every
//!   token, where one token's noise is unbounded (a uniform that rounds to 1 gives +inf).
//!
//! Malformed candidates (unsorted, NaN, an id out of range, missing or self-contradicting
//! penalised logits) are refused too.

use super::{cut, generated_counts, penalise, penalised_ids, pick, PenaltyHistory, SamplingParams};
use std::cmp::Ordering;
use tf_models::{candidate_rank, RowCandidates};

/// The token [`sample`](super::sample) draws from the whole row at `position`, from the row's
/// `candidates` and the raw logits `penalised` of (at least) every token [`penalised_ids`]
/// names for (`params`, `history`, `vocab`), in any order; None when they do not determine it.
pub fn sample_candidates(
    candidates: &RowCandidates,
    penalised: &[(u32, f32)],
    vocab: usize,
    params: &SamplingParams,
    history: PenaltyHistory,
    position: u64,
) -> Option<u32> {
    let (prefix, complete) = certified_prefix(candidates, penalised, vocab, params, history)?;
    if params.temperature <= 0.0 {
        return greedy(&prefix, complete);
    }
    if prefix.is_empty() {
        // An all-NaN row draws token 0 (as `sample`); an empty incomplete prefix decides nothing.
        return complete.then(|| pick(&[(0, 0.0)], params, position).token);
    }
    let kept = if complete || (1..=prefix.len()).contains(&params.top_k) {
        cut(prefix, params)
    } else if top_p_off(params) && params.min_p > 0.0 {
        let n = prefix.len();
        let kept = cut(prefix, params);
        // The min-p run must end inside the prefix: then the whole row keeps the same tokens.
        if kept.len() >= n {
            return None;
        }
        kept
    } else {
        return None;
    };
    Some(pick(&kept, params, position).token)
}

/// Whether `cap` candidates per row can decide a draw with `params` (for some rows): greedy,
/// a top-k within `cap`, or min-p without top-p. When false, [`sample_candidates`] decides a
/// row only if it holds at most `cap` non-NaN logits or penalised tokens extend the prefix past
/// `cap`; a caller fetches such rows whole instead (the draw is exact either way).
pub fn candidates_may_decide(params: &SamplingParams, cap: usize) -> bool {
    params.temperature <= 0.0
        || (1..=cap).contains(&params.top_k)
        || (top_p_off(params) && params.min_p > 0.0)
}

/// Whether top-p is off (as `cut` tests it: a NaN top_p is off too).
fn top_p_off(params: &SamplingParams) -> bool {
    let on = params.top_p < 1.0;
    !on
}

/// The argmax over the certified prefix, when it decides the whole row's.
fn greedy(prefix: &[(u32, f32)], complete: bool) -> Option<u32> {
    let Some(&(_, max)) = prefix.first() else {
        return complete.then_some(0);
    };
    let last = prefix.last().map_or(max, |c| c.1);
    // (The prefix holds no NaN.)
    if !complete && last >= max {
        return None;
    }
    prefix.iter().filter(|c| c.1 == max).map(|c| c.0).min()
}

/// The penalised row's leading sorted entries the inputs determine, and whether they are the
/// whole (non-NaN) row; None for malformed inputs.
fn certified_prefix(
    candidates: &RowCandidates,
    penalised: &[(u32, f32)],
    vocab: usize,
    params: &SamplingParams,
    history: PenaltyHistory,
) -> Option<(Vec<(u32, f32)>, bool)> {
    let top = &candidates.top;
    let well_formed = top.len() <= candidates.non_nan
        && top.iter().all(|c| !c.1.is_nan() && (c.0 as usize) < vocab)
        && top
            .windows(2)
            .all(|w| candidate_rank(&w[0], &w[1]) == Ordering::Less);
    if !well_formed {
        return None;
    }
    let complete = candidates.complete();
    let touched = penalised_ids(params, history, vocab);
    if touched.is_empty() {
        return Some((top.clone(), complete));
    }
    // The raw logits of the touched tokens (an entry twice must agree with itself).
    let mut raw: Vec<(u32, f32)> = penalised
        .iter()
        .filter(|c| touched.binary_search(&c.0).is_ok())
        .copied()
        .collect();
    raw.sort_unstable_by_key(|c| c.0);
    if raw
        .windows(2)
        .any(|w| w[0].0 == w[1].0 && w[0].1.to_bits() != w[1].1.to_bits())
    {
        return None;
    }
    raw.dedup_by_key(|c| c.0);
    if raw.len() != touched.len() {
        return None;
    }
    let counts = generated_counts(params, history);
    let mut merged: Vec<(u32, f32)> = top
        .iter()
        .filter(|c| touched.binary_search(&c.0).is_err())
        .copied()
        .collect();
    merged.extend(
        raw.iter()
            .map(|&(t, l)| (t, penalise(l, params, counts.get(&t).copied())))
            .filter(|c| !c.1.is_nan()),
    );
    merged.sort_unstable_by(candidate_rank);
    if complete {
        return Some((merged, true));
    }
    let bound = *top.last()?;
    merged.retain(|c| candidate_rank(c, &bound) != Ordering::Greater);
    Some((merged, false))
}

#[cfg(test)]
mod tests;
