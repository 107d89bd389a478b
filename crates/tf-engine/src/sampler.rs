//! The keyed sampler (DESIGN.md): the token drawn at a position is a pure function of
//! (seed, absolute position, logits, penalty history), never of batching or drafting.
//!
//! Greedy (temperature 0) is the argmax with ties broken by the lower token id. Otherwise the
//! logits are penalised, divided by the temperature and cut to candidates by top-k, top-p and
//! min-p; the pick is a Gumbel-max over the candidates, with each candidate's Gumbel noise a
//! counter-based hash of (seed, position, token id), so no RNG state is carried between steps.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;

pub mod candidates;
pub use candidates::{candidates_may_decide, sample_candidates};

/// Sampling settings of one request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SamplingParams {
    /// 0 means greedy.
    pub temperature: f32,
    /// Keep only the k most likely tokens (0 = off).
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability reaches top_p (1 = off).
    pub top_p: f32,
    /// Drop tokens whose probability is below min_p times the top token's (0 = off).
    pub min_p: f32,
    /// Subtracted once from the logit of every token already generated (OpenAI semantics).
    pub presence_penalty: f32,
    /// Subtracted per occurrence from the logit of every token already generated.
    pub frequency_penalty: f32,
    /// Divides positive (multiplies negative) logits of tokens seen in prompt or reply (1 = off).
    pub repetition_penalty: f32,
    /// The request's seed (the caller derives one from the prompt when the request gave none).
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            repetition_penalty: 1.0,
            seed: 0,
        }
    }
}

/// Tokens the penalties look at: the whole context (for repetition) and the reply so far
/// (for presence and frequency).
#[derive(Debug, Clone, Copy, Default)]
pub struct PenaltyHistory<'a> {
    pub prompt: &'a [u32],
    pub generated: &'a [u32],
}

/// A sampled token. (Its log-probability, when a request asks, comes from the scheduler's
/// `logprob_of`; the draw itself never needs it.)
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampled {
    pub token: u32,
}

/// Derives a request seed from its prompt ids (used when the request carries no seed).
pub fn seed_from_prompt(prompt: &[u32]) -> u64 {
    prompt
        .iter()
        .fold(0x9e37_79b9_7f4a_7c15, |h, &t| splitmix64(h ^ t as u64))
}

/// splitmix64's finaliser: a strong 64-bit mix.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A uniform draw in the open interval (0, 1), keyed by (seed, position, token).
fn keyed_uniform(seed: u64, position: u64, token: u32) -> f64 {
    let h = splitmix64(splitmix64(splitmix64(seed) ^ position) ^ token as u64);
    ((h >> 11) as f64 + 0.5) / (1u64 << 53) as f64
}

/// Applies presence, frequency and repetition penalties in place.
pub fn apply_penalties(logits: &mut [f32], params: &SamplingParams, history: PenaltyHistory) {
    let touched = penalised_ids(params, history, logits.len());
    if touched.is_empty() {
        return;
    }
    let counts = generated_counts(params, history);
    for t in touched {
        let l = &mut logits[t as usize];
        *l = penalise(*l, params, counts.get(&t).copied());
    }
}

/// The tokens whose logits the penalties change, ascending, each below `vocab`: every token of
/// prompt and reply when the repetition penalty is on, the reply's when presence or frequency
/// is.
pub fn penalised_ids(params: &SamplingParams, history: PenaltyHistory, vocab: usize) -> Vec<u32> {
    let mut ids: Vec<u32> = Vec::new();
    if params.repetition_penalty != 1.0 {
        ids.extend(history.prompt.iter().chain(history.generated));
    } else if params.presence_penalty != 0.0 || params.frequency_penalty != 0.0 {
        ids.extend(history.generated);
    }
    ids.retain(|&t| (t as usize) < vocab);
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Occurrences of each token in the reply, when presence or frequency penalties are on.
fn generated_counts(params: &SamplingParams, history: PenaltyHistory) -> HashMap<u32, u32> {
    let mut counts: HashMap<u32, u32> = HashMap::new();
    if params.presence_penalty != 0.0 || params.frequency_penalty != 0.0 {
        for &t in history.generated {
            *counts.entry(t).or_default() += 1;
        }
    }
    counts
}

/// The penalised logit of a token of [`penalised_ids`] (so of prompt or reply): the repetition
/// penalty (divides a positive logit, multiplies the others) when on, then presence + frequency
/// * count subtracted when the token is in the reply (`count`, from [`generated_counts`]).
fn penalise(l: f32, params: &SamplingParams, count: Option<u32>) -> f32 {
    let mut l = l;
    if params.repetition_penalty != 1.0 {
        l = if l > 0.0 {
            l / params.repetition_penalty
        } else {
            l * params.repetition_penalty
        };
    }
    if let Some(c) = count {
        l -= params.presence_penalty + params.frequency_penalty * c as f32;
    }
    l
}

/// Index of the largest value, ties to the lowest index; NaN never wins.
pub fn argmax(values: &[f32]) -> u32 {
    let mut best = 0usize;
    for (i, &v) in values.iter().enumerate() {
        if v > values[best] || values[best].is_nan() && !v.is_nan() {
            best = i;
        }
    }
    best as u32
}

/// Draws the token at `position` from `logits` (which the call may modify: penalties are
/// applied in place).
pub fn sample(
    logits: &mut [f32],
    params: &SamplingParams,
    history: PenaltyHistory,
    position: u64,
) -> Sampled {
    apply_penalties(logits, params, history);
    if params.temperature <= 0.0 {
        return Sampled {
            token: argmax(logits),
        };
    }
    let candidates = cut(sorted_candidates(logits), params);
    pick(&candidates, params, position)
}

/// The Gumbel-max draw over `candidates` (non-empty, as [`cut`] leaves them).
fn pick(candidates: &[(u32, f32)], params: &SamplingParams, position: u64) -> Sampled {
    let inv_t = 1.0 / params.temperature as f64;
    let (mut best, mut best_key) = (candidates[0].0, f64::NEG_INFINITY);
    for &(id, logit) in candidates {
        let u = keyed_uniform(params.seed, position, id);
        let key = logit as f64 * inv_t - (-u.ln()).ln();
        if key > best_key || key == best_key && id < best {
            best = id;
            best_key = key;
        }
    }
    Sampled { token: best }
}

/// Every non-NaN logit as (id, logit), sorted by logit (descending, total order) then token id;
/// `[(0, 0.0)]` when every logit is NaN.
fn sorted_candidates(logits: &[f32]) -> Vec<(u32, f32)> {
    let mut c: Vec<(u32, f32)> = logits
        .iter()
        .enumerate()
        .filter(|(_, l)| !l.is_nan())
        .map(|(i, &l)| (i as u32, l))
        .collect();
    if c.is_empty() {
        return vec![(0, 0.0)];
    }
    c.sort_unstable_by(tf_models::candidate_rank);
    c
}

/// The candidates top-k, top-p and min-p leave of `c` (non-empty, sorted as
/// [`sorted_candidates`] leaves them).
fn cut(mut c: Vec<(u32, f32)>, params: &SamplingParams) -> Vec<(u32, f32)> {
    if params.top_k > 0 {
        c.truncate(params.top_k);
    }
    let inv_t = 1.0 / params.temperature as f64;
    let top = c[0].1 as f64 * inv_t;
    let weights: Vec<f64> = c
        .iter()
        .map(|&(_, l)| (l as f64 * inv_t - top).exp())
        .collect();
    let total: f64 = weights.iter().sum();
    let mut keep = c.len();
    if params.top_p < 1.0 {
        let mut cum = 0.0;
        for (i, w) in weights.iter().enumerate() {
            cum += w / total;
            if cum >= params.top_p as f64 {
                keep = i + 1;
                break;
            }
        }
    }
    if params.min_p > 0.0 {
        // weights[0] is the top token's unnormalised weight (1.0).
        let floor = params.min_p as f64 * weights[0];
        keep = keep.min(weights.iter().take_while(|&&w| w >= floor).count().max(1));
    }
    c.truncate(keep.max(1));
    c
}

#[cfg(test)]
mod tests {
    use super::argmax;

    /// The one-pass loop `argmax` replaced: the first largest value, NaN never winning.
    fn reference(values: &[f32]) -> u32 {
        let mut best = 0usize;
        for (i, &v) in values.iter().enumerate() {
            if v > values[best] || values[best].is_nan() && !v.is_nan() {
                best = i;
            }
        }
        best as u32
    }

    #[test]
    fn argmax_is_the_first_largest_value_and_nan_never_wins() {
        let nan = f32::NAN;
        let inf = f32::INFINITY;
        let special: [&[f32]; 7] = [
            &[],
            &[nan, nan],
            &[nan, -inf, 1.0],
            &[-0.0, 0.0],
            &[0.0, -0.0, nan],
            &[-inf, -inf, -inf],
            &[1.0, 3.0, 3.0, nan, inf, inf],
        ];
        for v in special {
            assert_eq!(argmax(v), reference(v), "{v:?}");
        }
        let mut r = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            r
        };
        for _ in 0..3000 {
            let n = (next() % 80) as usize;
            let v: Vec<f32> = (0..n)
                .map(|_| match next() % 8 {
                    0 => nan,
                    1 => -0.0,
                    2 => 0.0,
                    3 => -inf,
                    _ => (next() % 6) as f32 - 2.0,
                })
                .collect();
            assert_eq!(argmax(&v), reference(&v), "{v:?}");
        }
        // Control: the last of equal maxima is a different answer, and the check sees it.
        let last =
            |v: &[f32]| v.len() as u32 - 1 - argmax(&v.iter().rev().copied().collect::<Vec<_>>());
        assert_ne!(last(&[3.0, 1.0, 3.0]), reference(&[3.0, 1.0, 3.0]));
    }
}
