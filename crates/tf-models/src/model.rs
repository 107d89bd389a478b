//! The interface every family's forward pass implements.

use crate::error::ModelError;
use std::sync::{Arc, Mutex};
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
///
/// A device backend keeps the stream's KV (and recurrent) state in its own memory, in the slot
/// `device` names; `kv` and `mamba` are then empty and [`Model::host_copy`] brings the state to
/// the host. A clone of such a state is an empty stream (`len` 0): device state is copied only
/// through the model.
#[derive(Debug)]
pub struct StreamState {
    /// Attention keys and values, one layer cache per attention layer.
    pub kv: KvCache,
    /// Tokens consumed so far (the next row's position).
    pub len: usize,
    /// Recurrent state (conv and SSM) of each Mamba layer, in layer order; empty for families
    /// without recurrent layers.
    pub mamba: Vec<MambaState>,
    /// The device slot holding this stream's state, when a device backend holds it.
    pub device: Option<DeviceSlot>,
}

impl Clone for StreamState {
    fn clone(&self) -> StreamState {
        let mut s = StreamState {
            kv: self.kv.clone(),
            len: self.len,
            mamba: self.mamba.clone(),
            device: None,
        };
        if self.device.is_some() {
            s.len = 0;
        }
        s
    }
}

/// A device backend's stream slot, returned to the backend's free list when dropped.
#[derive(Debug)]
pub struct DeviceSlot {
    id: usize,
    recurrent: bool,
    free: Arc<Mutex<Vec<usize>>>,
}

impl DeviceSlot {
    /// Takes a slot from `free` (None when every slot is in use); `recurrent`: the slot holds
    /// recurrent (Mamba) state, which cannot be cut back.
    pub fn take(free: &Arc<Mutex<Vec<usize>>>, recurrent: bool) -> Option<DeviceSlot> {
        let id = free.lock().ok()?.pop()?;
        Some(DeviceSlot {
            id,
            recurrent,
            free: free.clone(),
        })
    }

    /// The slot's index in the backend's pools.
    pub fn id(&self) -> usize {
        self.id
    }

    /// Whether the slot holds recurrent state.
    pub fn recurrent(&self) -> bool {
        self.recurrent
    }
}

impl Drop for DeviceSlot {
    fn drop(&mut self) {
        if let Ok(mut f) = self.free.lock() {
            f.push(self.id);
        }
    }
}

impl StreamState {
    /// A fresh host-resident state.
    pub fn new(kv: KvCache, mamba: Vec<MambaState>) -> StreamState {
        StreamState {
            kv,
            len: 0,
            mamba,
            device: None,
        }
    }

    /// Rolls the stream back to its first `len` tokens (a rejected draft, a resumed prefix).
    ///
    /// Recurrent (Mamba) state holds no history and cannot be rolled back: truncating such a
    /// stream to fewer tokens than it holds restarts it from empty (`len` becomes 0; the caller
    /// must feed the prefix again, and a row at any other position is refused as a gap).
    pub fn truncate(&mut self, len: usize) {
        if len < self.len && self.is_recurrent() {
            self.kv.truncate(0);
            self.mamba.iter_mut().for_each(MambaState::clear);
            self.len = 0;
            return;
        }
        self.kv.truncate(len);
        self.len = self.len.min(len);
    }

    /// Whether the state has recurrent (Mamba) layers, on the host or on a device.
    pub fn is_recurrent(&self) -> bool {
        !self.mamba.is_empty() || self.device.as_ref().is_some_and(DeviceSlot::recurrent)
    }

    /// Whether the state can return to an earlier length by restoring a host copy of its
    /// recurrent layers (a draft window's backup): host recurrent state can, device state
    /// cannot (its drafts are off).
    pub fn host_rollback(&self) -> bool {
        !self.is_recurrent() || self.device.is_none()
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

/// The most likely tokens of one logits row, as a device selection returns them instead of the
/// whole row (the sampler decides from them when they determine its draw; see
/// `tf_engine::sampler::candidates`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RowCandidates {
    /// (token id, logit) of the row's largest non-NaN logits: the leading entries of the row
    /// sorted by logit descending in f32 total order (`total_cmp`, so -0 ranks below +0), ties
    /// by the lower id; at most the model's capacity, none for a row carried whole. The logits
    /// are the row's own.
    pub top: Vec<(u32, f32)>,
    /// Non-NaN logits in the whole row: `top` is the whole row when this is at most `top.len()`.
    pub non_nan: usize,
    /// (token id, logit) of the ids the caller asked for with the round (the tokens its
    /// penalties touch), in the order asked.
    pub extra: Vec<(u32, f32)>,
    /// The whole row, when the caller asked for it with the round ([`RowWant::whole`]); else
    /// empty.
    pub whole: Vec<f32>,
}

/// What the caller of [`Model::forward_candidates`] needs of one wanted row besides its
/// candidates.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RowWant {
    /// Ids (each below the vocabulary size) whose logits the row's candidates carry
    /// ([`RowCandidates::extra`]).
    pub extra: Vec<u32>,
    /// Whether the whole row comes too ([`RowCandidates::whole`]): the caller knows its
    /// candidates cannot decide its draw.
    pub whole: bool,
}

impl RowCandidates {
    /// The candidates of a host row: its `cap` largest non-NaN logits (the reference a device
    /// selection must equal bit for bit).
    pub fn of_row(row: &[f32], cap: usize) -> RowCandidates {
        let mut top: Vec<(u32, f32)> = row
            .iter()
            .enumerate()
            .filter(|(_, l)| !l.is_nan())
            .map(|(i, &l)| (i as u32, l))
            .collect();
        let non_nan = top.len();
        if cap < non_nan {
            top.select_nth_unstable_by(cap.saturating_sub(1), candidate_rank);
        }
        top.truncate(cap);
        top.sort_unstable_by(candidate_rank);
        RowCandidates {
            top,
            non_nan,
            extra: Vec::new(),
            whole: Vec::new(),
        }
    }

    /// Whether `top` holds every non-NaN logit of the row.
    pub fn complete(&self) -> bool {
        self.non_nan <= self.top.len()
    }
}

/// The candidates' order: logit descending in total order, then the lower id first.
pub fn candidate_rank(a: &(u32, f32), b: &(u32, f32)) -> std::cmp::Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

/// A model's own draft head (multi-token prediction layers over the model's hidden states):
/// a draft source for the scheduler. Drafts are verified, so a head changes speed, never tokens.
pub trait DraftHead {
    /// Width of a hidden row.
    fn hidden_size(&self) -> usize;

    /// A fresh, empty per-stream state of the head's own layers (positions are draft positions).
    fn new_draft_state(&self) -> Result<StreamState, ModelError>;

    /// The hidden rows the head conditions on, `[rows, hidden]` in row order, of every row of
    /// the latest [`Model::forward`] call.
    fn target_hidden(&self) -> &[f32];

    /// Runs the head over `rows`: row i conditions on `hidden[i]` (a target hidden row at some
    /// position t, or a previous call's `hidden_out` row when chaining) and embeds
    /// `rows[i].token`, the token at t+1; `rows[i].pos` continues the row's draft state. Writes
    /// every row's output hidden to `hidden_out` and, for rows with `logits`, the logits of the
    /// token at t+2 to `logits` (in row order).
    fn draft_forward(
        &mut self,
        rows: &[Row],
        hidden: &[f32],
        states: &mut [&mut StreamState],
        hidden_out: &mut Vec<f32>,
        logits: &mut Vec<f32>,
    ) -> Result<(), ModelError>;
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

    /// Most candidates per row [`Model::forward_candidates`] returns; 0 (the default) when the
    /// model has no candidate selection and the caller must use [`Model::forward`].
    fn candidate_capacity(&self) -> usize {
        0
    }

    /// Runs one round as [`Model::forward`] does, but returns, for each row with `logits ==
    /// true` (wanted row k, in row order), the row's largest logits ([`RowCandidates`], at most
    /// [`Model::candidate_capacity`] each) instead of the whole row, with what `wants[k]` asks
    /// for besides (a missing entry asks for nothing): the logits of some ids, or the whole row.
    /// The whole rows stay with the model until its next round (draft-head calls included):
    /// [`Model::candidate_row`] and [`Model::candidate_logits`] read them. The default refuses
    /// (capacity 0).
    fn forward_candidates(
        &mut self,
        _rows: &[Row],
        _states: &mut [&mut StreamState],
        _wants: &[RowWant],
        _candidates: &mut Vec<RowCandidates>,
    ) -> Result<(), ModelError> {
        Err(ModelError::Backend {
            backend: self.info().family,
            message: "this model has no candidate selection (candidate_capacity is 0)".into(),
        })
    }

    /// The whole logits row of wanted row `k` of the latest [`Model::forward_candidates`] call.
    fn candidate_row(&mut self, _k: usize, _out: &mut Vec<f32>) -> Result<(), ModelError> {
        Err(ModelError::Backend {
            backend: self.info().family,
            message: "this model has no candidate selection (candidate_capacity is 0)".into(),
        })
    }

    /// The logits of `ids` (each below the vocabulary size) in wanted row `k` of the latest
    /// [`Model::forward_candidates`] call, in the order of `ids`.
    fn candidate_logits(
        &mut self,
        k: usize,
        ids: &[u32],
        out: &mut Vec<f32>,
    ) -> Result<(), ModelError> {
        let mut row = Vec::new();
        self.candidate_row(k, &mut row)?;
        out.clear();
        for &id in ids {
            out.push(*row.get(id as usize).ok_or(ModelError::TokenOutOfRange {
                token: id,
                vocab: row.len(),
            })?);
        }
        Ok(())
    }

    /// A copy of `state` held on the host (what the prompt cache retains). Backends that keep
    /// stream state in device memory download it; the default clones.
    fn host_copy(&mut self, state: &StreamState) -> Result<StreamState, ModelError> {
        Ok(state.clone())
    }

    /// The model's own draft head, when its checkpoint carries one (default: none).
    fn draft_head(&mut self) -> Option<&mut dyn DraftHead> {
        None
    }

    /// One line for the log saying where this model's drafts come from.
    fn draft_note(&self) -> String {
        format!(
            "{}: no draft head; drafts use context copies",
            self.info().family
        )
    }
}

/// Checks that rows name streams of the call, continue them, and stay in range.
pub fn check_rows(
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
