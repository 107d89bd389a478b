//! The interface every family's forward pass implements.

use crate::error::ModelError;
use tf_kernels::ops::{KvCache, MambaState};

/// One token of one stream in a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    /// Index of the stream's state in the `states` slice of the call.
    pub stream: usize,
    /// Absolute position of the token in its stream (0-based).
    pub pos: usize,
    /// The token id.
    pub token: u32,
    /// Whether the caller wants this row's logits.
    pub logits: bool,
}

/// Everything one stream carries between rounds.
#[derive(Debug, Clone)]
pub struct StreamState {
    /// Attention keys and values, one layer cache per attention layer.
    pub kv: KvCache,
    /// Tokens consumed so far (the next row's position).
    pub len: usize,
    /// Recurrent state (conv and SSM) of each Mamba layer, in layer order; empty for families
    /// without recurrent layers.
    pub mamba: Vec<MambaState>,
}

impl StreamState {
    /// Rolls the stream back to its first `len` tokens (a rejected draft, a resumed prefix).
    ///
    /// Recurrent (Mamba) state holds no history and cannot be rolled back: truncating such a
    /// stream to fewer tokens than it holds restarts it from empty (`len` becomes 0; the caller
    /// must feed the prefix again, and a row at any other position is refused as a gap).
    pub fn truncate(&mut self, len: usize) {
        if len < self.len && !self.mamba.is_empty() {
            self.kv.truncate(0);
            self.mamba.iter_mut().for_each(MambaState::clear);
            self.len = 0;
            return;
        }
        self.kv.truncate(len);
        self.len = self.len.min(len);
    }

    /// Bytes held by the state.
    pub fn bytes(&self) -> usize {
        self.kv.bytes() + self.mamba.iter().map(MambaState::bytes).sum::<usize>()
    }
}

/// Facts about a loaded model the engine needs.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelInfo {
    /// The family ("llama", ...).
    pub family: &'static str,
    /// Rows of the logits.
    pub vocab_size: usize,
    /// Longest stream the model accepts.
    pub context: usize,
    /// KV (and state) bytes one more token of a stream costs.
    pub state_bytes_per_token: usize,
    /// Bytes of weights read from the checkpoint.
    pub weight_bytes: usize,
}

/// A loaded model: a forward pass over rounds of rows.
pub trait Model: Send {
    /// Facts about the model.
    fn info(&self) -> &ModelInfo;

    /// A fresh, empty stream state.
    fn new_state(&self) -> StreamState;

    /// Runs one round. Each row must continue its stream (`row.pos == states[row.stream].len`
    /// at the time the row is reached; a stream's rows come in ascending position). Logits of the
    /// rows with `logits == true` are written to `logits`, `vocab_size` each, in row order.
    fn forward(
        &mut self,
        rows: &[Row],
        states: &mut [&mut StreamState],
        logits: &mut Vec<f32>,
    ) -> Result<(), ModelError>;
}

/// Checks that rows name streams of the call, continue them, and stay in range.
pub(crate) fn check_rows(
    rows: &[Row],
    states: &[&mut StreamState],
    vocab: usize,
    context: usize,
) -> Result<(), ModelError> {
    let mut next: Vec<usize> = states.iter().map(|s| s.len).collect();
    for r in rows {
        let len = next.get_mut(r.stream).ok_or(ModelError::NoSuchStream {
            stream: r.stream,
            streams: states.len(),
        })?;
        if r.pos != *len {
            return Err(ModelError::PositionGap {
                stream: r.stream,
                pos: r.pos,
                len: *len,
            });
        }
        if r.token as usize >= vocab {
            return Err(ModelError::TokenOutOfRange {
                token: r.token,
                vocab,
            });
        }
        if r.pos >= context {
            return Err(ModelError::ContextExceeded {
                pos: r.pos,
                context,
            });
        }
        *len += 1;
    }
    Ok(())
}
