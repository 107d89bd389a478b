//! Counters and gauges the scheduler keeps, read by /health, /metrics and the live display.

use crate::prompt_cache::CacheStats;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Atomic counters (totals since start) and gauges (now).
#[derive(Debug, Default)]
pub struct Metrics {
    pub(crate) requests: AtomicU64,
    pub(crate) finished: AtomicU64,
    pub(crate) cancelled: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) rejected: AtomicU64,
    pub(crate) prompt_tokens: AtomicU64,
    pub(crate) generated_tokens: AtomicU64,
    pub(crate) rounds: AtomicU64,
    pub(crate) prefill_nanos: AtomicU64,
    pub(crate) decode_nanos: AtomicU64,
    pub(crate) running: AtomicU64,
    pub(crate) waiting: AtomicU64,
    pub(crate) state_bytes: AtomicU64,
    pub(crate) reserved_bytes: AtomicU64,
    pub(crate) draft_proposed: AtomicU64,
    pub(crate) draft_accepted: AtomicU64,
    pub(crate) decode_steps: AtomicU64,
    pub(crate) cache_hits: AtomicU64,
    pub(crate) cache_misses: AtomicU64,
    pub(crate) cache_reused_tokens: AtomicU64,
    pub(crate) cache_evictions: AtomicU64,
    pub(crate) cache_entries: AtomicU64,
    pub(crate) cache_bytes: AtomicU64,
}

/// A copy of the metrics at one instant.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Requests admitted to a slot.
    pub requests: u64,
    /// Streams that finished (stop or length).
    pub finished: u64,
    /// Streams whose client left before the end.
    pub cancelled: u64,
    /// Streams the forward pass failed.
    pub failed: u64,
    /// Submissions refused because the queue was full.
    pub rejected: u64,
    /// Prompt tokens prefilled.
    pub prompt_tokens: u64,
    /// Tokens generated.
    pub generated_tokens: u64,
    /// Rounds run.
    pub rounds: u64,
    /// Seconds of round time attributed to prompt rows (by their share of the round's rows).
    pub prefill_seconds: f64,
    /// Seconds of round time attributed to decode rows.
    pub decode_seconds: f64,
    /// Streams running now.
    pub running: usize,
    /// Requests waiting for a slot now.
    pub waiting: usize,
    /// Bytes of stream state (KV cache) held now.
    pub state_bytes: u64,
    /// Bytes reserved by running streams (their states at their limits).
    pub reserved_bytes: u64,
    /// Drafted tokens verified.
    pub draft_proposed: u64,
    /// Drafted tokens kept (each equal to the keyed sample at its position).
    pub draft_accepted: u64,
    /// Decode steps: one per stream per round it decoded in (a verified window counts once),
    /// so generated tokens / decode steps is the tokens per forward.
    pub decode_steps: u64,
    /// Prompt cache lookups that resumed a retained prefix.
    pub cache_hits: u64,
    /// Prompt cache lookups that found nothing usable.
    pub cache_misses: u64,
    /// Prompt tokens resumed from the prompt cache instead of fed.
    pub cache_reused_tokens: u64,
    /// Prompt cache entries dropped to stay within its budget.
    pub cache_evictions: u64,
    /// Prompt cache entries held now.
    pub cache_entries: u64,
    /// Bytes the prompt cache holds now.
    pub cache_bytes: u64,
}

impl Metrics {
    /// Reads every counter.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            requests: self.requests.load(Relaxed),
            finished: self.finished.load(Relaxed),
            cancelled: self.cancelled.load(Relaxed),
            failed: self.failed.load(Relaxed),
            rejected: self.rejected.load(Relaxed),
            prompt_tokens: self.prompt_tokens.load(Relaxed),
            generated_tokens: self.generated_tokens.load(Relaxed),
            rounds: self.rounds.load(Relaxed),
            prefill_seconds: self.prefill_nanos.load(Relaxed) as f64 * 1e-9,
            decode_seconds: self.decode_nanos.load(Relaxed) as f64 * 1e-9,
            running: self.running.load(Relaxed) as usize,
            waiting: self.waiting.load(Relaxed) as usize,
            state_bytes: self.state_bytes.load(Relaxed),
            reserved_bytes: self.reserved_bytes.load(Relaxed),
            draft_proposed: self.draft_proposed.load(Relaxed),
            draft_accepted: self.draft_accepted.load(Relaxed),
            decode_steps: self.decode_steps.load(Relaxed),
            cache_hits: self.cache_hits.load(Relaxed),
            cache_misses: self.cache_misses.load(Relaxed),
            cache_reused_tokens: self.cache_reused_tokens.load(Relaxed),
            cache_evictions: self.cache_evictions.load(Relaxed),
            cache_entries: self.cache_entries.load(Relaxed),
            cache_bytes: self.cache_bytes.load(Relaxed),
        }
    }

    /// Copies the prompt cache's counters and size (the scheduler thread owns the cache).
    pub(crate) fn set_cache(&self, c: &CacheStats) {
        self.cache_hits.store(c.hits, Relaxed);
        self.cache_misses.store(c.misses, Relaxed);
        self.cache_reused_tokens.store(c.reused_tokens, Relaxed);
        self.cache_evictions.store(c.evictions, Relaxed);
        self.cache_entries.store(c.entries as u64, Relaxed);
        self.cache_bytes.store(c.bytes as u64, Relaxed);
    }

    pub(crate) fn set_waiting(&self, n: usize) {
        self.waiting.store(n as u64, Relaxed);
    }

    /// Adds one round: `prefill_rows` prompt rows and `decode_rows` decode rows in `nanos`.
    pub(crate) fn add_round(&self, prefill_rows: usize, decode_rows: usize, nanos: u64) {
        self.rounds.fetch_add(1, Relaxed);
        let total = (prefill_rows + decode_rows).max(1) as u128;
        let p = (nanos as u128 * prefill_rows as u128 / total) as u64;
        self.prefill_nanos.fetch_add(p, Relaxed);
        self.decode_nanos.fetch_add(nanos - p, Relaxed);
        self.prompt_tokens.fetch_add(prefill_rows as u64, Relaxed);
    }
}
