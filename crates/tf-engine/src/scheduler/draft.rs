//! Drafts: each model gets one draft source ([`Drafter`]): context copies (propose what
//! followed the latest earlier occurrence of a stream's last few tokens) or the model's own
//! MTP head ([`mtp`]). Per-stream acceptance turns drafting off where it doesn't pay.
//!
//! A draft never changes a token: the scheduler verifies each drafted token against the keyed
//! sample at its position and keeps only the longest prefix that equals it, whatever the
//! source.

mod mtp;
#[cfg(test)]
mod tests;

use super::stream::Running;
use super::SchedulerConfig;
use tf_models::Model;

/// Where a model's drafts come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DraftSource {
    /// What followed an earlier occurrence of the stream's tail.
    ContextCopy,
    /// The model's MTP head, conditioned on the model's hidden states.
    Mtp,
}

/// The scheduler's draft source for one model, and the line that says which it is.
#[derive(Debug)]
pub(crate) struct Drafter {
    source: DraftSource,
    note: String,
}

impl Drafter {
    /// Chooses the model's draft source: its draft head when it has one, else context copies.
    pub fn new(model: &mut dyn Model) -> Drafter {
        let source = if model.draft_head().is_some() {
            DraftSource::Mtp
        } else {
            DraftSource::ContextCopy
        };
        Drafter {
            source,
            note: model.draft_note(),
        }
    }

    /// The chosen source.
    #[cfg(test)]
    pub fn source(&self) -> DraftSource {
        self.source
    }

    /// One line for the log: where this model's drafts come from.
    pub fn note(&self) -> &str {
        &self.note
    }

    /// Chooses each decoding stream's drafted tokens for this round, no longer than the
    /// stream's remaining tokens (less the one sampled after the window) and its context. With
    /// an MTP head, first feeds the head every verified position it has not seen.
    pub fn propose(
        &mut self,
        model: &mut dyn Model,
        running: &mut [Running],
        cfg: &SchedulerConfig,
        context: usize,
    ) {
        let mut want = vec![0usize; running.len()];
        for (s, k) in running.iter_mut().zip(want.iter_mut()) {
            s.draft.clear();
            // Recurrent state on a device cannot return to the last accepted token: no drafts.
            if s.pending.is_none()
                || cfg.draft_tokens == 0
                || !s.req.draft
                || !s.drafts.on
                || !s.state.host_rollback()
            {
                continue;
            }
            let left = s.req.max_tokens.saturating_sub(s.generated.len() + 1);
            let room = context.saturating_sub(s.state.len + 1);
            *k = cfg.draft_tokens.min(left).min(room);
        }
        match self.source {
            DraftSource::ContextCopy => {
                for (s, &k) in running.iter_mut().zip(&want) {
                    if k > 0 {
                        s.draft = propose(&history(s), cfg.draft_match_tokens, k);
                    }
                }
            }
            DraftSource::Mtp => mtp::propose(model, running, &want),
        }
    }

    /// After a round's forward: hands the model's hidden rows of `rows` to the streams' MTP
    /// trackers (nothing for context copies).
    pub fn observe(
        &mut self,
        model: &mut dyn Model,
        rows: &[tf_models::Row],
        running: &mut [Running],
    ) {
        if self.source == DraftSource::Mtp {
            mtp::observe(model, rows, running);
        }
    }
}

/// A stream's tokens so far: prompt, then generated (the last one possibly not yet fed).
fn history(s: &Running) -> Vec<u32> {
    let mut h = Vec::with_capacity(s.req.prompt.len() + s.generated.len());
    h.extend_from_slice(&s.req.prompt);
    h.extend_from_slice(&s.generated);
    h
}

/// Tokens of the stream's tail that must match an earlier occurrence, by default.
pub(crate) const MATCH_TOKENS: usize = 3;
/// Drafted tokens a stream must have had verified before its acceptance is judged.
const JUDGE_AFTER: u64 = 16;
/// Drafting stays on for a stream while at least 1 in `KEEP_RATIO` drafted tokens is accepted.
const KEEP_RATIO: u64 = 4;

/// Proposes up to `k` tokens: what followed the latest earlier occurrence of the last `n`
/// tokens of `history` (empty when there is none).
pub fn propose(history: &[u32], n: usize, k: usize) -> Vec<u32> {
    let len = history.len();
    if n == 0 || k == 0 || len < n + 1 {
        return Vec::new();
    }
    let tail = &history[len - n..];
    for start in (0..len - n).rev() {
        if &history[start..start + n] == tail {
            let from = start + n;
            return history[from..(from + k).min(len)].to_vec();
        }
    }
    Vec::new()
}

/// A stream's drafting record.
#[derive(Debug, Clone)]
pub(crate) struct DraftStats {
    /// Whether the stream still drafts.
    pub on: bool,
    /// Drafted tokens verified so far.
    pub proposed: u64,
    /// Drafted tokens kept.
    pub accepted: u64,
    /// The stream's MTP head state, when its drafts come from an MTP head.
    pub(crate) mtp: Option<Box<mtp::MtpTrack>>,
}

impl DraftStats {
    /// A record for a stream that may draft (`on`) or not.
    pub fn new(on: bool) -> Self {
        DraftStats {
            on,
            proposed: 0,
            accepted: 0,
            mtp: None,
        }
    }

    /// Records one verified window; turns drafting off when acceptance stays low.
    pub fn record(&mut self, proposed: usize, accepted: usize) {
        self.proposed += proposed as u64;
        self.accepted += accepted as u64;
        if self.proposed >= JUDGE_AFTER && self.accepted * KEEP_RATIO < self.proposed {
            self.on = false;
            self.mtp = None;
        }
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn proposes_what_followed_the_latest_occurrence() {
        //            0  1  2  3  4  5  6  7  8  9 10 11
        let h = [1, 2, 3, 9, 8, 1, 2, 3, 7, 6, 1, 2, 3];
        assert_eq!(propose(&h, 3, 4), vec![7, 6, 1, 2]);
        assert_eq!(propose(&h, 3, 1), vec![7]);
        // The follow-up may run into the tail itself, but never past the end.
        let h = [5, 5, 5, 5];
        assert_eq!(propose(&h, 3, 4), vec![5]);
    }

    #[test]
    fn proposes_nothing_without_a_match() {
        assert!(propose(&[1, 2, 3, 4, 5], 3, 4).is_empty());
        assert!(propose(&[1, 2], 3, 4).is_empty());
        assert!(propose(&[1, 2, 3, 1, 2, 3], 3, 0).is_empty());
        // Planted control: the same history with a repeat does propose.
        assert_eq!(propose(&[1, 2, 3, 4, 1, 2, 3], 3, 4), vec![4, 1, 2, 3]);
    }

    #[test]
    fn low_acceptance_turns_drafting_off() {
        let mut s = DraftStats::new(true);
        for _ in 0..3 {
            s.record(4, 0);
        }
        assert!(s.on, "not judged before {JUDGE_AFTER} drafted tokens");
        s.record(4, 0);
        assert!(!s.on);
        let mut good = DraftStats::new(true);
        for _ in 0..10 {
            good.record(4, 2);
        }
        assert!(good.on);
    }
}
