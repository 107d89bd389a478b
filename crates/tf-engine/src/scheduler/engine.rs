//! The scheduler thread: admit, plan a round, run it, sample, retire.

use super::draft::{DraftStats, Drafter};
use super::stream::{Outcome, Running, StreamEvent};
use super::Shared;
use crate::prompt_cache::{ChunkPlan, PromptCache};
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;
use tf_models::{Model, Row, RowWant, StreamState};

/// A copy of a stream's recurrent state.
type Mamba = Vec<tf_kernels::ops::MambaState>;

/// One round's rows and who gets which logits.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct RoundPlan {
    /// Rows in order: decode rows first, then prompt chunks.
    pub rows: Vec<Row>,
    /// For each row that wants logits, in row order, the index of its stream.
    pub owners: Vec<usize>,
    /// (stream index, prompt tokens fed after this round) for streams prefilling.
    pub advances: Vec<(usize, usize)>,
    /// Decode rows in the round.
    pub decode_rows: usize,
}

/// What the planner needs to know of a stream.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StreamView<'a> {
    pub prompt: &'a [u32],
    pub prefilled: usize,
    pub state_len: usize,
    pub pending: Option<u32>,
    /// Drafted tokens to verify after `pending` (each row wants logits).
    pub draft: &'a [u32],
}

/// Plans a round: one decode row per stream with a pending token (followed by a row per
/// drafted token, all with logits), then whole chunks of prefilling streams' prompts (as
/// `chunks` cuts them: a grid restarted at each message start), in admission order, while
/// `prefill_budget` lasts (the first chunk is always taken, so prefill always moves).
pub(crate) fn plan_round(
    streams: &[StreamView],
    chunks: &ChunkPlan,
    prefill_budget: usize,
) -> RoundPlan {
    let mut plan = RoundPlan::default();
    for (i, s) in streams.iter().enumerate() {
        if let Some(token) = s.pending {
            plan.rows.push(Row {
                stream: i,
                pos: s.state_len,
                token,
                logits: true,
            });
            plan.owners.push(i);
            for (k, &d) in s.draft.iter().enumerate() {
                plan.rows.push(Row {
                    stream: i,
                    pos: s.state_len + 1 + k,
                    token: d,
                    logits: true,
                });
                plan.owners.push(i);
            }
            plan.decode_rows += 1 + s.draft.len();
        }
    }
    let mut budget = prefill_budget;
    let mut took = false;
    for (i, s) in streams.iter().enumerate() {
        if s.pending.is_some() || s.prefilled >= s.prompt.len() {
            continue;
        }
        let start = s.prefilled;
        let end = chunks.chunk_end(s.prompt, start);
        let n = end - start;
        if took && n > budget {
            continue;
        }
        for (pos, &token) in s.prompt.iter().enumerate().take(end).skip(start) {
            plan.rows.push(Row {
                stream: i,
                pos,
                token,
                logits: pos + 1 == s.prompt.len(),
            });
        }
        if end == s.prompt.len() {
            plan.owners.push(i);
        }
        plan.advances.push((i, end));
        budget = budget.saturating_sub(n);
        took = true;
        if budget == 0 {
            break;
        }
    }
    plan
}

/// The scheduler thread's body; returns when stopping and no stream is left.
pub(super) fn run(mut model: Box<dyn Model>, sh: &Shared) {
    let mut running: Vec<Running> = Vec::new();
    let mut logits = Vec::new();
    let mut scratch = Vec::new();
    let mut mixed = Vec::new();
    // A model with a candidate selection hands over each row's largest logits instead of the
    // row (the planted crosstalk needs whole rows).
    let use_candidates = model.candidate_capacity() > 0 && !sh.cfg.planted_crosstalk;
    let mut candidates = Vec::new();
    let mut whole_row = Vec::new();
    let context = sh.info.context;
    let vocab = sh.info.vocab_size;
    let mut drafter = Drafter::new(model.as_mut());
    eprintln!("{}", drafter.note());
    let chunks = ChunkPlan::new(sh.cfg.prefill_chunk, sh.cfg.message_marker.clone())
        .with_end_token(sh.cfg.message_end_token);
    let mut cache = PromptCache::new(sh.cfg.prompt_cache_bytes, chunks.clone())
        .with_planted_ignore_tokens(sh.cfg.planted_cache_ignores_tokens);
    loop {
        if !admit(sh, &mut running, model.as_ref(), &mut cache) {
            return;
        }
        for s in running.iter_mut() {
            if s.sink.is_closed() {
                s.outcome = Some(Outcome::Cancelled);
            }
        }
        retire(sh, &mut running, &mut cache, model.as_mut());
        if running.is_empty() {
            continue;
        }
        drafter.propose(model.as_mut(), &mut running, &sh.cfg, context);
        let views: Vec<StreamView> = running
            .iter()
            .map(|s| StreamView {
                prompt: &s.req.prompt,
                prefilled: s.prefilled,
                state_len: s.state.len,
                pending: s.pending,
                draft: &s.draft,
            })
            .collect();
        let plan = plan_round(&views, &chunks, sh.cfg.round_prefill_tokens);
        drop(views);
        // Recurrent state cannot be cut back: keep a copy to return to if a draft is rejected.
        let backups: Vec<Option<Vec<_>>> = running
            .iter()
            .map(|s| (!s.draft.is_empty() && s.state.is_recurrent()).then(|| s.state.mamba.clone()))
            .collect();
        // With candidates, each wanted row also carries the logits its penalties may touch, or
        // the whole row when its stream's draws need it.
        let mut wants: Vec<RowWant> = Vec::new();
        if use_candidates {
            let cap = model.candidate_capacity();
            for (k, &i) in plan.owners.iter().enumerate() {
                let want = match k.checked_sub(1) {
                    Some(p) if plan.owners[p] == i => wants[p].clone(),
                    _ => running[i].row_want(vocab, cap),
                };
                wants.push(want);
            }
        }
        let start = Instant::now();
        let result = {
            let mut states: Vec<&mut StreamState> =
                running.iter_mut().map(|s| &mut s.state).collect();
            if use_candidates {
                model.forward_candidates(&plan.rows, &mut states, &wants, &mut candidates)
            } else {
                model.forward(&plan.rows, &mut states, &mut logits)
            }
        };
        if let Err(e) = result {
            fail_rows(
                &mut running,
                &plan.rows,
                &format!("the forward pass failed: {e}"),
            );
            retire(sh, &mut running, &mut cache, model.as_mut());
            continue;
        }
        drafter.observe(model.as_mut(), &plan.rows, &mut running);
        let prefill_rows = plan.rows.len() - plan.decode_rows;
        sh.metrics.add_round(
            prefill_rows,
            plan.decode_rows,
            start.elapsed().as_nanos() as u64,
        );
        for &(i, fed) in &plan.advances {
            running[i].prefilled = fed;
        }
        for r in plan.rows.iter().take(plan.decode_rows) {
            running[r.stream].pending = None;
        }
        let n = plan.owners.len();
        let mut replay = Vec::new();
        let mut backups = backups;
        let mut j = 0;
        while j < n {
            let i = plan.owners[j];
            let span = plan.owners[j..].iter().take_while(|&&o| o == i).count();
            let s = &mut running[i];
            let draft = std::mem::take(&mut s.draft);
            let before = s.generated.len();
            let mut kept: usize = 0;
            for w in 0..span {
                let k = j + w;
                let forced = (sh.cfg.planted_unverified_drafts && w == 0)
                    .then(|| draft.first().copied())
                    .flatten();
                if use_candidates {
                    let taken = s.take_candidates(
                        model.as_mut(),
                        k,
                        candidates.get(k),
                        vocab,
                        &mut whole_row,
                        &mut scratch,
                        context,
                        forced,
                    );
                    if let Err(e) = taken {
                        let msg = format!("reading the logits failed: {e}");
                        let _ = s.sink.send(StreamEvent::Failed(msg));
                        s.outcome = Some(Outcome::Failed);
                        break;
                    }
                } else {
                    let Some(own) = logits.get(k * vocab..(k + 1) * vocab) else {
                        break;
                    };
                    let row = if sh.cfg.planted_crosstalk && n > 1 {
                        let o = (k + 1) % n;
                        let other = &logits[o * vocab..(o + 1) * vocab];
                        mixed.clear();
                        mixed.extend(own.iter().zip(other).map(|(a, b)| a + 0.5 * b));
                        &mixed[..]
                    } else {
                        own
                    };
                    s.take_logits(row, &mut scratch, context, forced);
                }
                kept += 1;
                if s.outcome.is_some() || draft.get(w).is_none_or(|&d| s.pending != Some(d)) {
                    break;
                }
            }
            sh.metrics
                .generated_tokens
                .fetch_add((s.generated.len() - before) as u64, Relaxed);
            if j < plan.decode_rows {
                sh.metrics.decode_steps.fetch_add(1, Relaxed);
                // The decode rows of stream i are rows j..j+span (decode rows all want logits).
                let base = plan.rows[j].pos;
                if !draft.is_empty() {
                    let accepted = kept.saturating_sub(1);
                    s.drafts.record(draft.len(), accepted);
                    sh.metrics
                        .draft_proposed
                        .fetch_add(draft.len() as u64, Relaxed);
                    sh.metrics
                        .draft_accepted
                        .fetch_add(accepted as u64, Relaxed);
                }
                roll_back(
                    s,
                    base + kept,
                    backups[i].take(),
                    &plan.rows[j..j + kept],
                    &mut replay,
                );
            }
            j += span;
        }
        if !replay.is_empty() {
            let result = {
                let mut states: Vec<&mut StreamState> =
                    running.iter_mut().map(|s| &mut s.state).collect();
                model.forward(&replay, &mut states, &mut logits)
            };
            if let Err(e) = result {
                fail_rows(
                    &mut running,
                    &replay,
                    &format!("replaying accepted draft rows failed: {e}"),
                );
            }
        }
        snapshot(&mut running, &cache, model.as_mut());
        retire(sh, &mut running, &mut cache, model.as_mut());
    }
}

/// Brings a stream's state back to its first `want` tokens after a verified window: attention
/// KV is cut back; recurrent state returns to `backup` (taken before the window) and the kept
/// rows `fed` are queued in `replay` to be fed again with the same forward routine.
fn roll_back(
    s: &mut Running,
    want: usize,
    backup: Option<Mamba>,
    fed: &[Row],
    replay: &mut Vec<Row>,
) {
    if s.state.len <= want {
        return;
    }
    match backup {
        Some(mamba) if s.state.is_recurrent() => {
            let base = want - fed.len();
            s.state.mamba = mamba;
            s.state.kv.truncate(base);
            s.state.len = base;
            replay.extend(fed.iter().map(|r| Row {
                logits: false,
                ..*r
            }));
        }
        _ => s.state.truncate(want),
    }
}

/// Fails every stream with a row in `rows` that is still running.
fn fail_rows(running: &mut [Running], rows: &[Row], msg: &str) {
    for r in rows {
        let s = &mut running[r.stream];
        if s.outcome.is_none() {
            let _ = s.sink.send(StreamEvent::Failed(msg.to_string()));
            s.outcome = Some(Outcome::Failed);
        }
    }
}

/// Keeps a copy of each recurrent stream's state when it stands on a chunk boundary of its
/// tokens: such state cannot be cut back, so this is what the prompt cache retains when the
/// stream leaves. A copy at a message start is kept apart from the latest one, so a later turn
/// (which re-renders this turn's reply, not necessarily as the same ids) resumes at least at
/// the start of this turn's last message.
fn snapshot(running: &mut [Running], cache: &PromptCache, model: &mut dyn Model) {
    if !cache.enabled() {
        return;
    }
    let plan = cache.plan();
    for s in running.iter_mut() {
        let len = s.state.len;
        let have = |snap: &Option<StreamState>| snap.as_ref().is_some_and(|x| x.len == len);
        if !s.state.is_recurrent() || len == 0 || have(&s.snapshot) || have(&s.message_snapshot) {
            continue;
        }
        let history = s.history();
        if !plan.is_boundary(&history, len) {
            continue;
        }
        let Ok(copy) = model.host_copy(&s.state) else {
            continue;
        };
        if plan.segment_start(&history, len) == len {
            s.message_snapshot = Some(copy);
            s.snapshot = None;
        } else {
            s.snapshot = Some(copy);
        }
    }
}

/// Moves waiting requests into free slots (FIFO, while memory allows); blocks while there is
/// nothing to do. Returns false when the scheduler should stop.
fn admit(
    sh: &Shared,
    running: &mut Vec<Running>,
    model: &dyn Model,
    cache: &mut PromptCache,
) -> bool {
    let Ok(mut q) = sh.queue.lock() else {
        return false;
    };
    while running.is_empty() && q.waiting.is_empty() {
        if q.stopping {
            return false;
        }
        q = match sh.wake.wait(q) {
            Ok(q) => q,
            Err(_) => return false,
        };
    }
    let mut reserved: u64 = running.iter().map(|s| s.reserved_bytes).sum();
    let room = sh.plan.stream_room_bytes();
    while running.len() < sh.cfg.parallel {
        let Some(front) = q.waiting.front() else {
            break;
        };
        if front.sink.is_closed() {
            q.waiting.pop_front();
            sh.metrics.cancelled.fetch_add(1, Relaxed);
            continue;
        }
        let need = sh.plan.reserve_bytes(&front.req, sh.info.context);
        if reserved + need > room {
            break;
        }
        let Some(p) = q.waiting.pop_front() else {
            break;
        };
        reserved += need;
        sh.metrics.requests.fetch_add(1, Relaxed);
        let (state, cached) = match cache.lookup(&p.req.prompt) {
            Some(r) => (r.state, r.cached),
            None => (model.new_state(), 0),
        };
        let drafts = DraftStats::new(p.req.draft && sh.cfg.draft_tokens > 0);
        running.push(Running {
            req: p.req,
            sink: p.sink,
            state,
            prefilled: cached,
            cached,
            snapshot: None,
            message_snapshot: None,
            stop_token: None,
            generated: Vec::new(),
            pending: None,
            draft: Vec::new(),
            drafts,
            reserved_bytes: need,
            queued: p.queued_at.elapsed(),
            admitted_at: Instant::now(),
            first_token_at: None,
            outcome: None,
        });
    }
    sh.metrics.set_waiting(q.waiting.len());
    update_gauges(sh, running);
    sh.metrics.set_cache(&cache.stats());
    true
}

/// Drops streams that are over, counting how each ended; the state of a stream that finished
/// or was cancelled goes to the prompt cache (a failed one's may be half-advanced: dropped).
fn retire(sh: &Shared, running: &mut Vec<Running>, cache: &mut PromptCache, model: &mut dyn Model) {
    let mut i = 0;
    while i < running.len() {
        let Some(o) = running[i].outcome else {
            i += 1;
            continue;
        };
        let s = running.remove(i);
        let counter = match o {
            Outcome::Finished => &sh.metrics.finished,
            Outcome::Cancelled => &sh.metrics.cancelled,
            Outcome::Failed => &sh.metrics.failed,
        };
        counter.fetch_add(1, Relaxed);
        if o != Outcome::Failed && cache.enabled() {
            let mut tokens = s.history();
            // A reply that stopped on the message end token left the state standing where the
            // next turn's prompt holds that token: a boundary, so the final state is resumable.
            tokens.extend(s.stop_token);
            let final_on_boundary = cache.plan().is_boundary(&tokens, s.state.len);
            let snaps: Vec<StreamState> = [s.message_snapshot, s.snapshot]
                .into_iter()
                .flatten()
                .collect();
            for snap in snaps {
                cache.insert(&tokens, snap);
            }
            if !s.state.is_recurrent() || final_on_boundary {
                // Device state is kept as a host copy; its slot goes back with the stream.
                let kept = if s.state.device.is_some() {
                    model.host_copy(&s.state).ok()
                } else {
                    Some(s.state)
                };
                if let Some(state) = kept {
                    cache.insert(&tokens, state);
                }
            }
        }
    }
    update_gauges(sh, running);
    sh.metrics.set_cache(&cache.stats());
}

fn update_gauges(sh: &Shared, running: &[Running]) {
    let m = &sh.metrics;
    m.running.store(running.len() as u64, Relaxed);
    m.state_bytes.store(
        running.iter().map(|s| s.state.bytes() as u64).sum(),
        Relaxed,
    );
    m.reserved_bytes
        .store(running.iter().map(|s| s.reserved_bytes).sum(), Relaxed);
}
