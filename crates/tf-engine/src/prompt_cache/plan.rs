//! The prompt chunk plan: where prefill chunks (and so resume points) begin, as a function of
//! the token sequence alone.
//!
//! A *segment* starts at position 0 and at every occurrence of the message marker (the token
//! sequence that opens a chat message, found from the chat template; none: one segment). Each
//! segment is cut on a grid of `grid` tokens counted from its own start, so chunk boundaries
//! are `s + k·grid` for every segment start `s`, up to the next segment start. A fresh request
//! and a resumed one see the same tokens, so they take the same chunks; and a conversation's
//! later turn shares every boundary of the earlier turn's prefix (a boundary at `p` depends only
//! on the tokens up to `p` and the marker starting there), which is where the prompt cache can
//! resume it — for recurrent (Mamba) state, exactly at the start of a message.
//!
//! With an end token (the token that closes every message, `<|im_end|>`), every position that
//! holds it is a boundary too (the grid does not restart there): a reply that stopped on that
//! token left its stream standing exactly where the next turn's prompt has it, so the whole
//! previous turn resumes.

/// Chunk boundaries from a fixed grid restarted at every message marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkPlan {
    grid: usize,
    marker: Vec<u32>,
    end: Option<u32>,
}

impl ChunkPlan {
    /// A plan on the grid `grid` (at least 1), restarted at each occurrence of `marker`
    /// (empty: the plain grid `k·grid`).
    pub fn new(grid: usize, marker: Vec<u32>) -> ChunkPlan {
        ChunkPlan {
            grid: grid.max(1),
            marker,
            end: None,
        }
    }

    /// The same plan with a boundary at every position holding `end` (the message end token).
    pub fn with_end_token(mut self, end: Option<u32>) -> ChunkPlan {
        self.end = end;
        self
    }

    /// The message end token, if any.
    pub fn end_token(&self) -> Option<u32> {
        self.end
    }

    /// Whether the message end token stands at `pos` (never at 0).
    fn end_at(&self, tokens: &[u32], pos: usize) -> bool {
        pos > 0 && self.end.is_some() && tokens.get(pos).copied() == self.end
    }

    /// The grid step.
    pub fn grid(&self) -> usize {
        self.grid
    }

    /// The message marker (empty when there is none).
    pub fn marker(&self) -> &[u32] {
        &self.marker
    }

    /// Whether a message marker starts at `pos` of `tokens` (never at 0: 0 always starts a
    /// segment anyway).
    fn marker_at(&self, tokens: &[u32], pos: usize) -> bool {
        !self.marker.is_empty()
            && pos > 0
            && tokens
                .get(pos..)
                .is_some_and(|rest| rest.starts_with(&self.marker))
    }

    /// The start of the segment holding `pos`: the latest marker at or before it, else 0.
    pub fn segment_start(&self, tokens: &[u32], pos: usize) -> usize {
        if self.marker.is_empty() {
            return 0;
        }
        (1..=pos.min(tokens.len()))
            .rev()
            .find(|&p| self.marker_at(tokens, p))
            .unwrap_or(0)
    }

    /// Whether `pos` (at most `tokens.len()`) is a chunk boundary: a segment start, a grid
    /// step from one, or a message end token.
    pub fn is_boundary(&self, tokens: &[u32], pos: usize) -> bool {
        if pos > tokens.len() {
            return false;
        }
        (pos - self.segment_start(tokens, pos)) % self.grid == 0 || self.end_at(tokens, pos)
    }

    /// The latest boundary at or before `pos`.
    pub fn boundary_at_most(&self, tokens: &[u32], pos: usize) -> usize {
        let pos = pos.min(tokens.len());
        let s = self.segment_start(tokens, pos);
        let grid = s + (pos - s) / self.grid * self.grid;
        (grid + 1..=pos)
            .rev()
            .find(|&p| self.end_at(tokens, p))
            .unwrap_or(grid)
    }

    /// The end of the chunk that starts at `start`: the next grid step of its segment, the
    /// next marker, or the end of `tokens`, whichever comes first.
    pub fn chunk_end(&self, tokens: &[u32], start: usize) -> usize {
        let len = tokens.len();
        if start >= len {
            return len;
        }
        let s = self.segment_start(tokens, start);
        let grid_next = s + ((start - s) / self.grid + 1) * self.grid;
        let stop = grid_next.min(len);
        (start + 1..stop)
            .find(|&p| self.marker_at(tokens, p) || self.end_at(tokens, p))
            .unwrap_or(stop)
    }

    /// Every chunk boundary of `tokens` in order, from 0 to `tokens.len()` inclusive.
    pub fn boundaries(&self, tokens: &[u32]) -> Vec<usize> {
        let mut out = vec![0];
        let mut at = 0;
        while at < tokens.len() {
            at = self.chunk_end(tokens, at);
            out.push(at);
        }
        out
    }

    /// Positions where a message marker starts (excluding 0).
    pub fn message_starts(&self, tokens: &[u32]) -> Vec<usize> {
        (1..tokens.len())
            .filter(|&p| self.marker_at(tokens, p))
            .collect()
    }
}
