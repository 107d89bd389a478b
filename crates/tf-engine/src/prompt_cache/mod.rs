//! The prompt cache: retained conversation prefixes with their stream state, within a byte
//! budget, least recently used evicted first.
//!
//! Resume points lie on the prompt's chunk boundaries only ([`ChunkPlan`]: a fixed grid
//! restarted at every message start), so a resumed request feeds the rest of its prompt in the
//! same chunks a fresh one would. Attention-only states are kept whole and cut back
//! (`StreamState::truncate`) to the boundary below the shared prefix; states with recurrent
//! (Mamba) layers cannot be cut back, so for them the scheduler keeps snapshots taken when the
//! stream stood exactly on a boundary (the latest message start, and the latest boundary), and
//! a snapshot is resumed only by a prompt that extends its whole token sequence and has a
//! boundary there. Because every kernel is row-invariant and attention reduces over keys in
//! absolute-position order, a resumed stream's logits equal a fresh one's bit for bit
//! (`tensorfold receipts resume`).

mod plan;
#[cfg(test)]
mod tests;

pub use plan::ChunkPlan;

use tf_models::StreamState;

/// One retained prefix.
#[derive(Debug)]
struct Entry {
    /// The tokens the state has consumed (`state.len` of them).
    tokens: Vec<u32>,
    state: StreamState,
    /// Whether the state can be cut back to a shorter prefix (no recurrent layers).
    truncatable: bool,
    bytes: usize,
    last_used: u64,
}

/// What a lookup found: a state standing at `cached` tokens of the prompt.
#[derive(Debug)]
pub struct Resumed {
    /// The state, `state.len == cached`.
    pub state: StreamState,
    /// Prompt tokens it already holds (a chunk boundary of the prompt, less than its length).
    pub cached: usize,
}

/// Counters of the cache's life so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups that resumed a prefix.
    pub hits: u64,
    /// Lookups that found nothing usable.
    pub misses: u64,
    /// Prompt tokens not fed again thanks to the cache.
    pub reused_tokens: u64,
    /// Entries dropped to stay within the budget.
    pub evictions: u64,
    /// Entries held now.
    pub entries: usize,
    /// Bytes held now.
    pub bytes: usize,
}

/// Retained prefixes within a byte budget.
#[derive(Debug)]
pub struct PromptCache {
    budget: usize,
    plan: ChunkPlan,
    entries: Vec<Entry>,
    tick: u64,
    stats: CacheStats,
    planted_ignore_tokens: bool,
}

impl PromptCache {
    /// A cache of at most `budget_bytes` (0 disables it) resuming on the boundaries of `plan`.
    pub fn new(budget_bytes: u64, plan: ChunkPlan) -> PromptCache {
        PromptCache {
            budget: usize::try_from(budget_bytes).unwrap_or(usize::MAX),
            plan,
            entries: Vec::new(),
            tick: 0,
            stats: CacheStats::default(),
            planted_ignore_tokens: false,
        }
    }

    /// Planted control for the resume receipt: match entries by length alone, ignoring their
    /// tokens (a cache keyed wrongly), so a prompt may resume another conversation's state and
    /// resumed != fresh. Never set outside tests and receipts' controls.
    pub fn with_planted_ignore_tokens(mut self, on: bool) -> PromptCache {
        self.planted_ignore_tokens = on;
        self
    }

    /// The chunk plan resume points lie on.
    pub fn plan(&self) -> &ChunkPlan {
        &self.plan
    }

    /// The byte budget.
    pub fn budget_bytes(&self) -> usize {
        self.budget
    }

    /// Whether the cache keeps anything at all.
    pub fn enabled(&self) -> bool {
        self.budget > 0
    }

    /// Counters and current size.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            entries: self.entries.len(),
            bytes: self.entries.iter().map(|e| e.bytes).sum(),
            ..self.stats
        }
    }

    /// The longest usable prefix of `prompt`: a copy of a retained state standing on a chunk
    /// boundary of the prompt, with at least one prompt token left to feed (the last prompt
    /// row gives the logits). None when no boundary past 0 is shared.
    pub fn lookup(&mut self, prompt: &[u32]) -> Option<Resumed> {
        if !self.enabled() || prompt.len() < 2 {
            return None;
        }
        let most = prompt.len() - 1;
        let mut best: Option<(usize, usize)> = None;
        for (i, e) in self.entries.iter().enumerate() {
            let common = if self.planted_ignore_tokens {
                e.tokens.len().min(prompt.len())
            } else {
                common_prefix(&e.tokens, prompt)
            }
            .min(most);
            if best.is_some_and(|(_, b)| common <= b) {
                continue;
            }
            let at = if e.truncatable {
                self.plan.boundary_at_most(prompt, common)
            } else if common == e.tokens.len() && self.plan.is_boundary(prompt, common) {
                common
            } else {
                0
            };
            if at > 0 && best.is_none_or(|(_, b)| at > b) {
                best = Some((i, at));
            }
        }
        let Some((i, at)) = best else {
            self.stats.misses += 1;
            return None;
        };
        self.tick += 1;
        let e = &mut self.entries[i];
        e.last_used = self.tick;
        let mut state = e.state.clone();
        state.truncate(at);
        if state.len != at {
            self.stats.misses += 1;
            return None;
        }
        self.stats.hits += 1;
        self.stats.reused_tokens += at as u64;
        Some(Resumed { state, cached: at })
    }

    /// Retains `state`, which has consumed `tokens[..state.len]` (`tokens` may go on: what
    /// follows shows whether a message starts at `state.len`). Attention-only states are kept
    /// whole; a state with recurrent layers must stand on a chunk boundary (else it is
    /// dropped: it could never be resumed). Evicts least recently used entries to stay within
    /// the budget; a state larger than the whole budget is not kept.
    pub fn insert(&mut self, tokens: &[u32], state: StreamState) {
        if !self.enabled() || state.len == 0 || tokens.len() < state.len {
            return;
        }
        let truncatable = !state.is_recurrent();
        if !truncatable && !self.plan.is_boundary(tokens, state.len) {
            return;
        }
        let tokens = tokens[..state.len].to_vec();
        let bytes = state.bytes() + tokens.len() * 4;
        if bytes > self.budget {
            return;
        }
        // An entry this one covers is of no further use: the same tokens, or (when both can
        // be cut back) a prefix of them.
        self.entries.retain(|e| {
            let covered = e.tokens == tokens
                || (truncatable && e.truncatable && tokens.starts_with(&e.tokens));
            !covered
        });
        self.tick += 1;
        self.entries.push(Entry {
            tokens,
            state,
            truncatable,
            bytes,
            last_used: self.tick,
        });
        self.evict_to(self.budget);
    }

    /// Drops least recently used entries until at most `bytes` are held.
    pub fn evict_to(&mut self, bytes: usize) {
        let mut held: usize = self.entries.iter().map(|e| e.bytes).sum();
        while held > bytes {
            let Some((i, _)) = self
                .entries
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.last_used)
            else {
                break;
            };
            held -= self.entries.swap_remove(i).bytes;
            self.stats.evictions += 1;
        }
    }

    /// Drops everything.
    pub fn clear(&mut self) {
        self.evict_to(0);
    }
}

/// A default budget: a quarter of the memory available now (`MemAvailable`), at most 8 GiB;
/// 0 (disabled) when /proc/meminfo cannot be read.
pub fn default_budget_bytes() -> u64 {
    let avail_kib = std::fs::read_to_string("/proc/meminfo").ok().and_then(|t| {
        t.lines()
            .find_map(|l| l.strip_prefix("MemAvailable:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
    });
    avail_kib.map_or(0, |k| (k * 1024 / 4).min(8 << 30))
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}
