//! The prompt cache: retained conversation prefixes with their stream state, within a byte
//! budget, least recently used evicted first.
//!
//! Resume points lie on the prefill grid `k·C` only, so a resumed request feeds the rest of its
//! prompt in the same chunks `[k·C, (k+1)·C)` a fresh one would. Attention-only states are kept
//! whole and cut back (`StreamState::truncate`) to the grid point below the shared prefix;
//! states with recurrent (Mamba) layers cannot be cut back, so for them the scheduler keeps a
//! snapshot taken when the stream stood exactly on a grid point, and that snapshot is resumed
//! only by a prompt that extends its whole token sequence. Because every kernel is
//! row-invariant and attention reduces over keys in absolute-position order, a resumed stream's
//! logits equal a fresh one's bit for bit (`tensorfold receipts resume`).

#[cfg(test)]
mod tests;

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
    /// Prompt tokens it already holds (a multiple of the grid, less than the prompt).
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
    grid: usize,
    entries: Vec<Entry>,
    tick: u64,
    stats: CacheStats,
    planted_ignore_tokens: bool,
}

impl PromptCache {
    /// A cache of at most `budget_bytes` (0 disables it) resuming on the grid `k·grid`.
    pub fn new(budget_bytes: u64, grid: usize) -> PromptCache {
        PromptCache {
            budget: usize::try_from(budget_bytes).unwrap_or(usize::MAX),
            grid: grid.max(1),
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

    /// The longest usable prefix of `prompt`: a copy of a retained state standing on a grid
    /// point, with at least one prompt token left to feed (the last prompt row gives the
    /// logits). None when nothing of at least one grid step matches.
    pub fn lookup(&mut self, prompt: &[u32]) -> Option<Resumed> {
        if !self.enabled() || prompt.len() <= self.grid {
            return None;
        }
        let most = (prompt.len() - 1) / self.grid * self.grid;
        let mut best: Option<(usize, usize)> = None;
        for (i, e) in self.entries.iter().enumerate() {
            let common = if self.planted_ignore_tokens {
                e.tokens.len().min(prompt.len())
            } else {
                common_prefix(&e.tokens, prompt)
            }
            .min(most);
            let at = if e.truncatable {
                common / self.grid * self.grid
            } else if common == e.tokens.len() && common % self.grid == 0 {
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

    /// Retains `state`, which has consumed `tokens[..state.len]`. Attention-only states are
    /// kept whole; a state with recurrent layers must stand on a grid point (else it is
    /// dropped). Evicts least recently used entries to stay within the budget; a state larger
    /// than the whole budget is not kept.
    pub fn insert(&mut self, tokens: &[u32], state: StreamState) {
        if !self.enabled() || state.len < self.grid || tokens.len() < state.len {
            return;
        }
        let truncatable = state.mamba.is_empty();
        if !truncatable && state.len % self.grid != 0 {
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
