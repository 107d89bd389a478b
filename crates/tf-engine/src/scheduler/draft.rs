//! Context-copy drafts: propose what followed the latest earlier occurrence of a stream's last
//! few tokens, and keep per-stream acceptance so drafting turns itself off where it doesn't pay.
//!
//! A draft never changes a token: the scheduler verifies each drafted token against the keyed
//! sample at its position and keeps only the longest prefix that equals it.

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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DraftStats {
    /// Whether the stream still drafts.
    pub on: bool,
    /// Drafted tokens verified so far.
    pub proposed: u64,
    /// Drafted tokens kept.
    pub accepted: u64,
}

impl DraftStats {
    /// A record for a stream that may draft (`on`) or not.
    pub fn new(on: bool) -> Self {
        DraftStats {
            on,
            proposed: 0,
            accepted: 0,
        }
    }

    /// Records one verified window; turns drafting off when acceptance stays low.
    pub fn record(&mut self, proposed: usize, accepted: usize) {
        self.proposed += proposed as u64;
        self.accepted += accepted as u64;
        if self.proposed >= JUDGE_AFTER && self.accepted * KEEP_RATIO < self.proposed {
            self.on = false;
        }
    }
}

#[cfg(test)]
mod tests {
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
