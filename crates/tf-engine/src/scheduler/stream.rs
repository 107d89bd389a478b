//! One stream in the scheduler: its request, its state, and the events it sends.

use super::draft::DraftStats;
use crate::generate::FinishReason;
use crate::sampler::{
    candidates_may_decide, penalised_ids, sample, sample_candidates, PenaltyHistory, SamplingParams,
};
use std::time::{Duration, Instant};
use tf_models::{Model, ModelError, RowCandidates, RowWant, StreamState};

/// What one stream should generate.
#[derive(Debug, Clone)]
pub struct StreamRequest {
    /// Prompt token ids (non-empty, shorter than the context).
    pub prompt: Vec<u32>,
    /// Sampling settings, the seed included.
    pub params: SamplingParams,
    /// Most tokens to generate (the context also ends the reply).
    pub max_tokens: usize,
    /// Token ids that end the reply (not included in it); empty to ignore EOS.
    pub stop_ids: Vec<u32>,
    /// Report each token's log-probability, with this many top alternatives.
    pub top_logprobs: Option<usize>,
    /// Whether the scheduler may verify context-copy drafts for this stream (false: the serial
    /// reference; the tokens are the same either way).
    pub draft: bool,
}

/// A token's log-probability under the model's distribution (softmax of the raw logits).
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    /// log p(token).
    pub logprob: f32,
    /// The most likely tokens and their log-probabilities, most likely first.
    pub top: Vec<(u32, f32)>,
}

/// One generated token.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenEvent {
    /// The token id.
    pub id: u32,
    /// Its log-probability, when the request asked for them.
    pub logprob: Option<TokenLogprob>,
}

/// How a stream ended, with its counts and timings.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    /// Stop (a stop token) or Length (max_tokens or the context).
    pub reason: FinishReason,
    /// Prompt tokens fed.
    pub prompt_tokens: usize,
    /// Prompt tokens resumed from the prompt cache instead of fed (part of `prompt_tokens`).
    pub cached_tokens: usize,
    /// Tokens generated (sent as Token events).
    pub generated_tokens: usize,
    /// Time spent waiting for a slot.
    pub queued: Duration,
    /// From admission to the first token.
    pub prefill: Duration,
    /// From the first token to the end.
    pub decode: Duration,
}

/// What the scheduler tells a stream's owner.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// A generated token.
    Token(TokenEvent),
    /// The stream ended normally.
    Finished(Finished),
    /// The stream failed (the forward pass returned an error).
    Failed(String),
}

/// Where a stream's events go. `send` returns false once nobody listens; the stream is then
/// cancelled and its state freed.
pub trait EventSink: Send + 'static {
    /// Delivers an event; false when the receiver is gone.
    fn send(&mut self, event: StreamEvent) -> bool;
    /// Whether the receiver is gone (checked every round, so a client that leaves during
    /// prefill is noticed too).
    fn is_closed(&self) -> bool {
        false
    }
}

impl EventSink for std::sync::mpsc::Sender<StreamEvent> {
    fn send(&mut self, event: StreamEvent) -> bool {
        std::sync::mpsc::Sender::send(self, event).is_ok()
    }
}

/// A stream admitted to the scheduler.
pub(crate) struct Running {
    pub req: StreamRequest,
    pub sink: Box<dyn EventSink>,
    pub state: StreamState,
    /// Prompt tokens fed so far.
    pub prefilled: usize,
    /// Prompt tokens resumed from the prompt cache.
    pub cached: usize,
    /// For streams with recurrent layers: the state as it stood at the latest chunk boundary
    /// (what the prompt cache keeps, since such state cannot be cut back), when that is later
    /// than `message_snapshot`.
    pub snapshot: Option<StreamState>,
    /// For streams with recurrent layers: the state as it stood at the latest message start.
    pub message_snapshot: Option<StreamState>,
    /// The stop token that ended the reply (sampled, not fed), when one did.
    pub stop_token: Option<u32>,
    /// Tokens generated so far.
    pub generated: Vec<u32>,
    /// The last sampled token, still to be fed (decode phase).
    pub pending: Option<u32>,
    /// Drafted tokens to verify after `pending` this round.
    pub draft: Vec<u32>,
    /// Drafting record (acceptance; whether it is still on).
    pub drafts: DraftStats,
    /// Bytes of state this stream may grow to (admission reserve).
    pub reserved_bytes: u64,
    pub queued: Duration,
    pub admitted_at: Instant,
    pub first_token_at: Option<Instant>,
    /// Set once the stream is over.
    pub outcome: Option<Outcome>,
}

/// How a stream left the scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// It finished (stop token, max_tokens, context).
    Finished,
    /// Its receiver went away.
    Cancelled,
    /// The forward pass failed.
    Failed,
}

impl Running {
    /// What this stream's rows of a candidate round need besides their candidates (`cap` per
    /// row): the logits of every token its penalties can touch in the round (its reply so far
    /// and the drafted tokens counted), or the whole row when the candidates cannot decide its
    /// draws or the request wants logprobs.
    pub fn row_want(&self, vocab: usize, cap: usize) -> RowWant {
        let params = &self.req.params;
        if self.req.top_logprobs.is_some() || !candidates_may_decide(params, cap) {
            return RowWant {
                extra: Vec::new(),
                whole: true,
            };
        }
        let mut generated = self.generated.clone();
        generated.extend_from_slice(&self.draft);
        let history = PenaltyHistory {
            prompt: &self.req.prompt,
            generated: &generated,
        };
        RowWant {
            extra: penalised_ids(params, history, vocab),
            whole: false,
        }
    }

    /// Samples the stream's next token from `logits` (its own row, `vocab` long; `scratch` is
    /// reused), sends it, and decides whether the stream goes on (`outcome` stays None and
    /// `pending` holds the token to feed). `context` bounds the stream. `forced` replaces the
    /// sample (only the drafts receipt's planted control passes one).
    pub fn take_logits(
        &mut self,
        logits: &[f32],
        scratch: &mut Vec<f32>,
        context: usize,
        forced: Option<u32>,
    ) {
        let pos = self.req.prompt.len() + self.generated.len();
        scratch.clear();
        scratch.extend_from_slice(logits);
        let history = PenaltyHistory {
            prompt: &self.req.prompt,
            generated: &self.generated,
        };
        let sampled = sample(scratch, &self.req.params, history, pos as u64).token;
        self.take_token(forced.unwrap_or(sampled), Some(logits), context);
    }

    /// [`Running::take_logits`] for wanted row `k` of the model's latest
    /// [`Model::forward_candidates`] round: the token comes from the row's `candidates` (and the
    /// penalised tokens' logits, from the candidates' `extra` or else read from the model) when
    /// they determine the whole-row draw, which is then the same token; otherwise (and for a
    /// forced token or a request for logprobs) from the whole row: the candidates' `whole` when
    /// the round carried it, else read into `row`. `vocab` is the model's.
    #[allow(clippy::too_many_arguments)]
    pub fn take_candidates(
        &mut self,
        model: &mut dyn Model,
        k: usize,
        candidates: Option<&RowCandidates>,
        vocab: usize,
        row: &mut Vec<f32>,
        scratch: &mut Vec<f32>,
        context: usize,
        forced: Option<u32>,
    ) -> Result<(), ModelError> {
        if let Some(c) = candidates.filter(|c| !c.whole.is_empty()) {
            self.take_logits(&c.whole, scratch, context, forced);
            return Ok(());
        }
        if let (Some(c), None, None) = (candidates, forced, self.req.top_logprobs) {
            let pos = self.req.prompt.len() + self.generated.len();
            let history = PenaltyHistory {
                prompt: &self.req.prompt,
                generated: &self.generated,
            };
            let ids = penalised_ids(&self.req.params, history, vocab);
            let mut have: Vec<u32> = c.extra.iter().map(|e| e.0).collect();
            have.sort_unstable();
            let mut raw = Vec::new();
            if ids.iter().any(|t| have.binary_search(t).is_err()) {
                // The round did not carry them all: read them from the kept row.
                model.candidate_logits(k, &ids, scratch)?;
                raw.extend(ids.iter().copied().zip(scratch.iter().copied()));
            }
            let penalised = if raw.is_empty() { &c.extra } else { &raw };
            let params = &self.req.params;
            let drawn = sample_candidates(c, penalised, vocab, params, history, pos as u64);
            if let Some(token) = drawn {
                self.take_token(token, None, context);
                return Ok(());
            }
        }
        model.candidate_row(k, row)?;
        self.take_logits(row, scratch, context, forced);
        Ok(())
    }

    /// Sends `token` (with its logprob from `logits` when the request asks and they are given)
    /// and decides whether the stream goes on.
    fn take_token(&mut self, token: u32, logits: Option<&[f32]>, context: usize) {
        let pos = self.req.prompt.len() + self.generated.len();
        if self.first_token_at.is_none() {
            self.first_token_at = Some(Instant::now());
        }
        if self.req.stop_ids.contains(&token) {
            self.stop_token = Some(token);
            return self.finish(FinishReason::Stop);
        }
        let logprob = self
            .req
            .top_logprobs
            .zip(logits)
            .map(|(k, l)| logprob_of(l, token, k));
        self.generated.push(token);
        if !self
            .sink
            .send(StreamEvent::Token(TokenEvent { id: token, logprob }))
        {
            self.outcome = Some(Outcome::Cancelled);
            return;
        }
        if self.generated.len() >= self.req.max_tokens || pos + 1 >= context {
            return self.finish(FinishReason::Length);
        }
        self.pending = Some(token);
    }

    /// The stream's tokens so far, in order (prompt, then generated): the state has consumed
    /// the first `state.len` of them.
    pub fn history(&self) -> Vec<u32> {
        let mut t = self.req.prompt.clone();
        t.extend_from_slice(&self.generated);
        t
    }

    /// Ends the stream with `reason`, sending the Finished event.
    pub fn finish(&mut self, reason: FinishReason) {
        let now = Instant::now();
        let first = self.first_token_at.unwrap_or(now);
        let _ = self.sink.send(StreamEvent::Finished(Finished {
            reason,
            prompt_tokens: self.req.prompt.len(),
            cached_tokens: self.cached,
            generated_tokens: self.generated.len(),
            queued: self.queued,
            prefill: first.duration_since(self.admitted_at),
            decode: now.duration_since(first),
        }));
        self.outcome = Some(Outcome::Finished);
    }
}

/// log-softmax of `logits` at `token`, with the `k` most likely tokens (ties by lower id).
pub(crate) fn logprob_of(logits: &[f32], token: u32, k: usize) -> TokenLogprob {
    let max = logits
        .iter()
        .copied()
        .filter(|l| !l.is_nan())
        .fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = logits
        .iter()
        .filter(|l| !l.is_nan())
        .map(|&l| (l as f64 - max).exp())
        .sum::<f64>()
        .ln()
        + max;
    let lp = |id: u32| {
        logits
            .get(id as usize)
            .map_or(f32::NEG_INFINITY, |&l| (l as f64 - lse) as f32)
    };
    let mut top: Vec<(u32, f32)> = Vec::new();
    if k > 0 {
        let mut ids: Vec<u32> = (0..logits.len() as u32)
            .filter(|&i| !logits[i as usize].is_nan())
            .collect();
        let k = k.min(ids.len());
        if k > 0 {
            ids.select_nth_unstable_by(k - 1, |&a, &b| {
                logits[b as usize]
                    .total_cmp(&logits[a as usize])
                    .then(a.cmp(&b))
            });
            ids.truncate(k);
            ids.sort_by(|&a, &b| {
                logits[b as usize]
                    .total_cmp(&logits[a as usize])
                    .then(a.cmp(&b))
            });
            top = ids.into_iter().map(|i| (i, lp(i))).collect();
        }
    }
    TokenLogprob {
        logprob: lp(token),
        top,
    }
}
