//! The draw from candidates against the draw from the whole row, on random rows (ties, NaN,
//! infinities, signed zeros), random parameters and penalty histories; planted wrong
//! candidates must give a different token somewhere.

use super::super::{apply_penalties, penalised_ids, sample, PenaltyHistory, SamplingParams};
use super::{candidates_may_decide, sample_candidates};
use std::collections::HashMap;
use tf_kernels::contract::Rng;
use tf_models::{candidate_rank, RowCandidates};

/// The penalties as sampler.rs wrote them before they were split per token (the reference the
/// per-token form must equal).
fn old_apply_penalties(logits: &mut [f32], params: &SamplingParams, history: PenaltyHistory) {
    if params.repetition_penalty != 1.0 {
        let mut seen: Vec<u32> = history
            .prompt
            .iter()
            .chain(history.generated)
            .copied()
            .collect();
        seen.sort_unstable();
        seen.dedup();
        for t in seen {
            if let Some(l) = logits.get_mut(t as usize) {
                *l = if *l > 0.0 {
                    *l / params.repetition_penalty
                } else {
                    *l * params.repetition_penalty
                };
            }
        }
    }
    if params.presence_penalty != 0.0 || params.frequency_penalty != 0.0 {
        let mut counts: HashMap<u32, u32> = HashMap::new();
        for &t in history.generated {
            *counts.entry(t).or_default() += 1;
        }
        for (t, c) in counts {
            if let Some(l) = logits.get_mut(t as usize) {
                *l -= params.presence_penalty + params.frequency_penalty * c as f32;
            }
        }
    }
}

/// A random row: quarter steps of a normal (many ties), with NaN, infinities and signed zeros
/// planted in some rows, and rows of one repeated value.
fn row(rng: &mut Rng, vocab: usize) -> Vec<f32> {
    let kind = rng.below(8);
    let mut r: Vec<f32> = (0..vocab)
        .map(|_| match kind {
            0 => 1.5,
            1 => (rng.below(3) as f32) - 1.0,
            _ => (rng.normal() * 12.0).round() / 4.0,
        })
        .collect();
    if kind >= 5 {
        let specials = [
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            0.0,
            -0.0,
            -f32::NAN,
        ];
        for _ in 0..1 + rng.below(vocab / 4 + 1) {
            let i = rng.below(vocab);
            r[i] = specials[rng.below(specials.len())];
        }
    }
    if kind == 7 && rng.below(4) == 0 {
        r.iter_mut().for_each(|l| *l = f32::NAN);
    }
    r
}

fn params(rng: &mut Rng) -> SamplingParams {
    let pick = |rng: &mut Rng, v: &[f32]| v[rng.below(v.len())];
    SamplingParams {
        temperature: pick(rng, &[0.0, 0.0, 0.3, 0.7, 1.0, 1.6]),
        top_k: [0, 0, 1, 2, 5, 20, 40, 300][rng.below(8)],
        top_p: pick(rng, &[1.0, 1.0, 0.9, 0.5]),
        min_p: pick(rng, &[0.0, 0.0, 0.05, 0.3]),
        presence_penalty: pick(rng, &[0.0, 0.0, 0.5, -0.75]),
        frequency_penalty: pick(rng, &[0.0, 0.0, 0.25, -0.5]),
        repetition_penalty: pick(rng, &[1.0, 1.0, 1.3, 0.8]),
        seed: rng.next_u64(),
    }
}

/// One random trial: the whole row, its parameters, history and position.
struct Trial {
    row: Vec<f32>,
    params: SamplingParams,
    prompt: Vec<u32>,
    generated: Vec<u32>,
    position: u64,
    cap: usize,
}

impl Trial {
    fn random(rng: &mut Rng) -> Trial {
        let vocab = [1usize, 2, 7, 50, 300, 1000, 4099][rng.below(7)];
        let tok = |rng: &mut Rng| rng.below(vocab + 3) as u32;
        let prompt = (0..rng.below(12)).map(|_| tok(rng)).collect();
        let generated = (0..rng.below(12)).map(|_| tok(rng)).collect();
        Trial {
            row: row(rng, vocab),
            params: params(rng),
            prompt,
            generated,
            position: rng.below(1 << 20) as u64,
            cap: [1usize, 2, 4, 16, 64, 256][rng.below(6)],
        }
    }

    fn history(&self) -> PenaltyHistory<'_> {
        PenaltyHistory {
            prompt: &self.prompt,
            generated: &self.generated,
        }
    }

    /// The whole-row draw.
    fn reference(&self) -> u32 {
        sample(
            &mut self.row.clone(),
            &self.params,
            self.history(),
            self.position,
        )
        .token
    }

    /// The draw from `candidates` (with the touched tokens' raw logits from the row).
    fn from(&self, candidates: &RowCandidates) -> Option<u32> {
        let vocab = self.row.len();
        let touched: Vec<(u32, f32)> = penalised_ids(&self.params, self.history(), vocab)
            .into_iter()
            .map(|t| (t, self.row[t as usize]))
            .collect();
        sample_candidates(
            candidates,
            &touched,
            vocab,
            &self.params,
            self.history(),
            self.position,
        )
    }
}

#[test]
fn per_token_penalties_equal_the_original_loops() {
    let mut rng = Rng::new(11);
    for _ in 0..3000 {
        let t = Trial::random(&mut rng);
        let (mut a, mut b) = (t.row.clone(), t.row.clone());
        apply_penalties(&mut a, &t.params, t.history());
        old_apply_penalties(&mut b, &t.params, t.history());
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&a), bits(&b));
    }
}

#[test]
fn candidates_give_the_whole_row_draw_or_none() {
    let mut rng = Rng::new(0x5eed);
    let (mut decided, mut greedy_decided, mut sampled_decided, mut penalised_decided) =
        (0, 0, 0, 0);
    let trials = 20_000;
    for _ in 0..trials {
        let t = Trial::random(&mut rng);
        let candidates = RowCandidates::of_row(&t.row, t.cap);
        let got = t.from(&candidates);
        // The parameter-level predicate rules out only rows the candidates alone cannot
        // decide (penalised tokens can extend the prefix past them).
        let touched = penalised_ids(&t.params, t.history(), t.row.len());
        assert!(
            got.is_none()
                || candidates.complete()
                || !touched.is_empty()
                || candidates_may_decide(&t.params, t.cap),
            "{:?} cap {}",
            t.params,
            t.cap
        );
        if let Some(token) = got {
            assert_eq!(
                token,
                t.reference(),
                "cap {} params {:?} row {:?}",
                t.cap,
                t.params,
                &t.row[..t.row.len().min(20)]
            );
            decided += 1;
            if t.params.temperature <= 0.0 {
                greedy_decided += 1;
            } else {
                sampled_decided += 1;
            }
            if !penalised_ids(&t.params, t.history(), t.row.len()).is_empty() {
                penalised_decided += 1;
            }
        }
    }
    // The check is not vacuous: most trials are decided, of every kind.
    assert!(decided > trials / 2, "{decided} of {trials} decided");
    assert!(greedy_decided > trials / 10, "{greedy_decided} greedy");
    assert!(sampled_decided > trials / 10, "{sampled_decided} sampled");
    assert!(
        penalised_decided > trials / 10,
        "{penalised_decided} penalised"
    );
}

/// Candidates that took the boundary's tied entries by the higher id (sorted correctly after).
fn ties_by_higher_id(row: &[f32], cap: usize) -> RowCandidates {
    let mut c = RowCandidates::of_row(row, usize::MAX);
    c.top
        .sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.cmp(&a.0)));
    c.top.truncate(cap);
    c.top.sort_by(candidate_rank);
    c
}

#[test]
fn planted_wrong_candidates_are_caught() {
    let mut rng = Rng::new(0xbad);
    let (mut ties_caught, mut short_caught) = (0, 0);
    for _ in 0..20_000 {
        let t = Trial::random(&mut rng);
        let want = t.reference();
        // Control 1: the boundary's ties taken by the higher id.
        if t.from(&ties_by_higher_id(&t.row, t.cap))
            .is_some_and(|g| g != want)
        {
            ties_caught += 1;
        }
        // Control 2: C too small for the claim: the candidates say they are the whole row.
        let mut short = RowCandidates::of_row(&t.row, t.cap);
        short.non_nan = short.top.len();
        if t.from(&short).is_some_and(|g| g != want) {
            short_caught += 1;
        }
    }
    assert!(
        ties_caught > 0,
        "boundary ties by the higher id were not caught"
    );
    assert!(
        short_caught > 0,
        "a too-small C claimed complete was not caught"
    );
}

fn greedy() -> SamplingParams {
    SamplingParams::default()
}

#[test]
fn greedy_needs_every_tie_of_the_maximum() {
    let row = vec![1.0, 3.0, 3.0, 3.0, 2.0];
    let h = PenaltyHistory::default();
    let of = |cap| RowCandidates::of_row(&row, cap);
    assert_eq!(of(4).top, vec![(1, 3.0), (2, 3.0), (3, 3.0), (4, 2.0)]);
    assert_eq!(sample_candidates(&of(4), &[], 5, &greedy(), h, 0), Some(1));
    // Three candidates, all tied: a fourth tie could be outside.
    assert_eq!(sample_candidates(&of(3), &[], 5, &greedy(), h, 0), None);
    // -0 and +0 are equal to the argmax, ranked apart by the selection.
    let zeros = vec![-1.0, -0.0, 0.0, -2.0];
    let c = RowCandidates::of_row(&zeros, 2);
    assert_eq!(c.top, vec![(2, 0.0), (1, -0.0)]);
    assert_eq!(sample_candidates(&c, &[], 4, &greedy(), h, 0), None);
    let c = RowCandidates::of_row(&zeros, 3);
    assert_eq!(sample_candidates(&c, &[], 4, &greedy(), h, 0), Some(1));
    // All NaN: token 0, as the whole-row argmax.
    let nan = vec![f32::NAN; 3];
    let c = RowCandidates::of_row(&nan, 2);
    assert_eq!((c.top.len(), c.non_nan), (0, 0));
    assert_eq!(sample_candidates(&c, &[], 3, &greedy(), h, 0), Some(0));
}

#[test]
fn a_penalty_can_raise_a_token_past_the_candidates() {
    // Token 4 is last in the raw row; a repetition penalty below 1 and a negative presence
    // penalty lift it to the top.
    let row = vec![5.0, 4.0, 3.0, 2.0, 1.0];
    let p = SamplingParams {
        repetition_penalty: 0.1,
        presence_penalty: -2.0,
        ..Default::default()
    };
    let generated = [4u32];
    let h = PenaltyHistory {
        prompt: &[],
        generated: &generated,
    };
    let c = RowCandidates::of_row(&row, 2);
    assert_eq!(sample(&mut row.clone(), &p, h, 0).token, 4);
    assert_eq!(sample_candidates(&c, &[(4, 1.0)], 5, &p, h, 0), Some(4));
    // Without the touched token's logit the candidates decide nothing.
    assert_eq!(sample_candidates(&c, &[], 5, &p, h, 0), None);
    // A wrong id in its place is refused too.
    assert_eq!(sample_candidates(&c, &[(3, 1.0)], 5, &p, h, 0), None);
    // More logits than the touched ones are fine; an id twice must agree with itself.
    assert_eq!(
        sample_candidates(&c, &[(3, 2.0), (4, 1.0)], 5, &p, h, 0),
        Some(4)
    );
    assert_eq!(
        sample_candidates(&c, &[(4, 1.0), (4, 1.0)], 5, &p, h, 0),
        Some(4)
    );
    assert_eq!(
        sample_candidates(&c, &[(4, 1.0), (4, 2.0)], 5, &p, h, 0),
        None
    );
}

#[test]
fn top_p_over_the_vocabulary_and_a_plain_tempered_draw_are_refused() {
    let mut rng = Rng::new(5);
    let row: Vec<f32> = (0..1000).map(|_| rng.normal() * 4.0).collect();
    let c = RowCandidates::of_row(&row, 64);
    let h = PenaltyHistory::default();
    let p = |top_k, top_p, min_p| SamplingParams {
        temperature: 0.8,
        top_k,
        top_p,
        min_p,
        seed: 3,
        ..Default::default()
    };
    assert_eq!(
        sample_candidates(&c, &[], 1000, &p(0, 0.9, 0.0), h, 1),
        None
    );
    assert_eq!(
        sample_candidates(&c, &[], 1000, &p(0, 1.0, 0.0), h, 1),
        None
    );
    assert_eq!(
        sample_candidates(&c, &[], 1000, &p(65, 1.0, 0.0), h, 1),
        None
    );
    // top-k within the candidates (top-p over the cut) and a min-p run inside them decide.
    let want = |q: &SamplingParams| sample(&mut row.clone(), q, h, 1).token;
    for q in [
        p(40, 0.9, 0.0),
        p(64, 1.0, 0.0),
        p(0, 1.0, 0.3),
        p(100, 1.0, 0.3),
    ] {
        assert_eq!(sample_candidates(&c, &[], 1000, &q, h, 1), Some(want(&q)));
    }
}

#[test]
fn malformed_candidates_are_refused() {
    let row = vec![1.0, 2.0, 3.0];
    let h = PenaltyHistory::default();
    let good = RowCandidates::of_row(&row, 2);
    assert_eq!(sample_candidates(&good, &[], 3, &greedy(), h, 0), Some(2));
    let mut unsorted = good.clone();
    unsorted.top.reverse();
    assert_eq!(sample_candidates(&unsorted, &[], 3, &greedy(), h, 0), None);
    let mut out_of_range = good.clone();
    out_of_range.top[1].0 = 7;
    assert_eq!(
        sample_candidates(&out_of_range, &[], 3, &greedy(), h, 0),
        None
    );
    let mut nan = good.clone();
    nan.top[1].1 = f32::NAN;
    assert_eq!(sample_candidates(&nan, &[], 3, &greedy(), h, 0), None);
    let mut overlong = good;
    overlong.non_nan = 1;
    assert_eq!(sample_candidates(&overlong, &[], 3, &greedy(), h, 0), None);
}
