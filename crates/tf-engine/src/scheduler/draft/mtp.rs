//! MTP drafts: the model's MTP head, fed the model's hidden state at each verified position `p`
//! with the token at `p+1`, proposes the token at `p+2`; further drafts chain the head on its
//! own output. The head's per-stream state only ever holds verified positions: chained
//! (speculative) rows are cut back as soon as the proposal is made, so a rejected draft needs
//! no roll back of the head.

use super::super::stream::Running;
use crate::sampler::argmax;
use tf_models::{Model, Row, StreamState};

/// One stream's MTP head state and the model's hidden rows not yet fed to the head.
#[derive(Debug, Clone)]
pub(crate) struct MtpTrack {
    /// The head's own state; its position `q` is the stream's absolute position `base + q`.
    state: StreamState,
    /// Absolute position of the head's position 0 (where tracking began).
    base: usize,
    /// Hidden rows of absolute positions `base + state.len ..`, one per row, not yet fed.
    pending: Vec<f32>,
    /// The head's output hidden at its latest fed position (the input of a chained step).
    out: Vec<f32>,
}

impl MtpTrack {
    /// Absolute position of the first pending hidden row.
    fn next(&self) -> usize {
        self.base + self.state.len
    }

    /// Pending hidden rows.
    fn pending_rows(&self, width: usize) -> usize {
        self.pending.len() / width.max(1)
    }
}

/// Turns MTP drafting off for every stream (the head failed; drafts never change tokens, so
/// streams go on without them).
fn give_up(running: &mut [Running], why: &str) {
    eprintln!("mtp drafts off: {why}");
    for s in running.iter_mut() {
        s.drafts.mtp = None;
        s.drafts.on = false;
        s.draft.clear();
    }
}

/// Copies the model's hidden rows of the latest forward (`rows`) into each drafting stream's
/// tracker, starting one where there is none; a row that does not continue the tracker's
/// positions restarts it there.
pub(super) fn observe(model: &mut dyn Model, rows: &[Row], running: &mut [Running]) {
    let Some(head) = model.draft_head() else {
        return;
    };
    let width = head.hidden_size();
    let hidden = head.target_hidden();
    if hidden.len() != rows.len() * width {
        return give_up(running, "the model returned no hidden rows for the round");
    }
    for (r, h) in rows.iter().zip(hidden.chunks_exact(width)) {
        let s = &mut running[r.stream];
        if !s.drafts.on || !s.req.draft {
            continue;
        }
        let fresh = match &mut s.drafts.mtp {
            Some(t) if r.pos >= t.next() && r.pos <= t.next() + t.pending_rows(width) => {
                // Rows past r.pos are left over from a rejected draft window: drop them.
                t.pending.truncate((r.pos - t.next()) * width);
                t.pending.extend_from_slice(h);
                false
            }
            _ => true,
        };
        if fresh {
            let state = match head.new_draft_state() {
                Ok(st) => st,
                Err(e) => return give_up(running, &e.to_string()),
            };
            s.drafts.mtp = Some(Box::new(MtpTrack {
                state,
                base: r.pos,
                pending: h.to_vec(),
                out: Vec::new(),
            }));
        }
    }
}

/// The stream's token at absolute position `q` (prompt, then generated; `q` must be known).
fn token_at(s: &Running, q: usize) -> u32 {
    let n = s.req.prompt.len();
    if q < n {
        s.req.prompt[q]
    } else {
        s.generated[q - n]
    }
}

/// What a chain must restore: (stream, head length, head recurrent state, head output).
type Saved = (usize, usize, Vec<tf_kernels::ops::MambaState>, Vec<f32>);

/// Feeds every tracker the verified positions it can (those below the stream's length whose
/// next token is known), then drafts up to `want[i]` tokens for each stream `i` whose tracker
/// has caught up with the stream.
pub(super) fn propose(model: &mut dyn Model, running: &mut [Running], want: &[usize]) {
    let Some(head) = model.draft_head() else {
        return;
    };
    let width = head.hidden_size();
    // 1. Feed: rows (hidden at p, token at p+1) for p < stream length with p+1 known.
    let tracked: Vec<usize> = (0..running.len())
        .filter(|&i| running[i].drafts.mtp.is_some())
        .collect();
    let (mut rows, mut hidden, mut last) = (Vec::new(), Vec::new(), Vec::new());
    for (j, &i) in tracked.iter().enumerate() {
        let s = &running[i];
        let Some(t) = s.drafts.mtp.as_deref() else {
            continue;
        };
        let known = s.req.prompt.len() + s.generated.len();
        let usable = s.state.len.min(known.saturating_sub(1));
        let n = usable.saturating_sub(t.next()).min(t.pending_rows(width));
        for q in 0..n {
            let p = t.next() + q;
            rows.push(Row {
                stream: j,
                pos: t.state.len + q,
                token: token_at(s, p + 1),
                logits: q + 1 == n && want[i] > 0 && p + 1 == s.state.len,
            });
        }
        hidden.extend_from_slice(&t.pending[..n * width]);
        last.push(n);
    }
    let (mut out, mut logits) = (Vec::new(), Vec::new());
    if !rows.is_empty() {
        let mut states: Vec<&mut StreamState> = Vec::with_capacity(tracked.len());
        for s in running.iter_mut().filter(|s| s.drafts.mtp.is_some()) {
            if let Some(t) = s.drafts.mtp.as_deref_mut() {
                states.push(&mut t.state);
            }
        }
        if let Err(e) = head.draft_forward(&rows, &hidden, &mut states, &mut out, &mut logits) {
            return give_up(running, &e.to_string());
        }
    }
    // Keep each tracker's unfed rows and its latest output; the first draft of each stream
    // whose latest fed position is the one before its pending token.
    let vocab = if rows.iter().any(|r| r.logits) {
        logits.len() / rows.iter().filter(|r| r.logits).count()
    } else {
        0
    };
    let (mut row_at, mut logit_at) = (0usize, 0usize);
    let mut chains: Vec<(usize, u32)> = Vec::new();
    for (j, &i) in tracked.iter().enumerate() {
        let n = last[j];
        let s = &mut running[i];
        let Some(t) = s.drafts.mtp.as_deref_mut() else {
            continue;
        };
        t.pending.drain(..n * width);
        if n > 0 {
            let end = row_at + n;
            t.out = out[(end - 1) * width..end * width].to_vec();
            if rows[end - 1].logits {
                let d1 = argmax(&logits[logit_at * vocab..(logit_at + 1) * vocab]);
                logit_at += 1;
                chains.push((i, d1));
            }
        }
        row_at += n;
    }
    // 2. Chain: step c conditions on the head's previous output and the previous draft.
    for &(i, d1) in &chains {
        running[i].draft.push(d1);
    }
    let mut active: Vec<usize> = chains
        .iter()
        .map(|&(i, _)| i)
        .filter(|&i| want[i] > 1)
        .collect();
    let saved: Vec<Saved> = active
        .iter()
        .filter_map(|&i| {
            let t = running[i].drafts.mtp.as_deref()?;
            Some((i, t.state.len, t.state.mamba.clone(), t.out.clone()))
        })
        .collect();
    while !active.is_empty() {
        let (mut rows, mut hidden) = (Vec::new(), Vec::new());
        for (j, &i) in active.iter().enumerate() {
            let s = &running[i];
            let Some(t) = s.drafts.mtp.as_deref() else {
                continue;
            };
            rows.push(Row {
                stream: j,
                pos: t.state.len,
                token: *s.draft.last().unwrap_or(&0),
                logits: true,
            });
            hidden.extend_from_slice(&t.out);
        }
        let mut states: Vec<&mut StreamState> = Vec::with_capacity(active.len());
        let mut k = 0;
        for (i, s) in running.iter_mut().enumerate() {
            if active.get(k) == Some(&i) {
                k += 1;
                if let Some(t) = s.drafts.mtp.as_deref_mut() {
                    states.push(&mut t.state);
                }
            }
        }
        let (mut o, mut l) = (Vec::new(), Vec::new());
        if states.len() != active.len()
            || head
                .draft_forward(&rows, &hidden, &mut states, &mut o, &mut l)
                .is_err()
        {
            break;
        }
        let vocab = l.len() / active.len();
        for (j, &i) in active.iter().enumerate() {
            let s = &mut running[i];
            s.draft.push(argmax(&l[j * vocab..(j + 1) * vocab]));
            if let Some(t) = s.drafts.mtp.as_deref_mut() {
                t.out = o[j * width..(j + 1) * width].to_vec();
            }
        }
        active.retain(|&i| running[i].draft.len() < want[i]);
    }
    // Cut the chained rows back: the head keeps only verified positions.
    for (i, len, mamba, out) in saved {
        if let Some(t) = running[i].drafts.mtp.as_deref_mut() {
            t.state.kv.truncate(len);
            t.state.mamba = mamba;
            t.state.len = len;
            t.out = out;
        }
    }
}
