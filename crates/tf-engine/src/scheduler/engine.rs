//! The scheduler thread: admit, plan a round, run it, sample, retire.

use super::stream::{Outcome, Running, StreamEvent};
use super::Shared;
use crate::prompt_cache::PromptCache;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;
use tf_models::{Model, Row, StreamState};

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
}

/// Plans a round: one decode row per stream with a pending token, then whole chunks of the
/// prompt grid `[k·chunk, (k+1)·chunk)` of prefilling streams, in admission order, while
/// `prefill_budget` lasts (the first chunk is always taken, so prefill always moves).
pub(crate) fn plan_round(streams: &[StreamView], chunk: usize, prefill_budget: usize) -> RoundPlan {
    let chunk = chunk.max(1);
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
            plan.decode_rows += 1;
        }
    }
    let mut budget = prefill_budget;
    let mut took = false;
    for (i, s) in streams.iter().enumerate() {
        if s.pending.is_some() || s.prefilled >= s.prompt.len() {
            continue;
        }
        let start = s.prefilled;
        let end = ((start / chunk + 1) * chunk).min(s.prompt.len());
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
    let context = sh.info.context;
    let vocab = sh.info.vocab_size;
    let mut cache = PromptCache::new(sh.cfg.prompt_cache_bytes, sh.cfg.prefill_chunk)
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
        retire(sh, &mut running, &mut cache);
        if running.is_empty() {
            continue;
        }
        let views: Vec<StreamView> = running
            .iter()
            .map(|s| StreamView {
                prompt: &s.req.prompt,
                prefilled: s.prefilled,
                state_len: s.state.len,
                pending: s.pending,
            })
            .collect();
        let plan = plan_round(&views, sh.cfg.prefill_chunk, sh.cfg.round_prefill_tokens);
        drop(views);
        let start = Instant::now();
        let result = {
            let mut states: Vec<&mut StreamState> =
                running.iter_mut().map(|s| &mut s.state).collect();
            model.forward(&plan.rows, &mut states, &mut logits)
        };
        if let Err(e) = result {
            let msg = format!("the forward pass failed: {e}");
            for r in &plan.rows {
                let s = &mut running[r.stream];
                if s.outcome.is_none() {
                    let _ = s.sink.send(StreamEvent::Failed(msg.clone()));
                    s.outcome = Some(Outcome::Failed);
                }
            }
            retire(sh, &mut running, &mut cache);
            continue;
        }
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
        for (j, &i) in plan.owners.iter().enumerate() {
            let Some(own) = logits.get(j * vocab..(j + 1) * vocab) else {
                continue;
            };
            let row = if sh.cfg.planted_crosstalk && n > 1 {
                let other = &logits[((j + 1) % n) * vocab..((j + 1) % n + 1) * vocab];
                mixed.clear();
                mixed.extend(own.iter().zip(other).map(|(a, b)| a + 0.5 * b));
                &mixed[..]
            } else {
                own
            };
            let s = &mut running[i];
            let before = s.generated.len();
            s.take_logits(row, &mut scratch, context);
            sh.metrics
                .generated_tokens
                .fetch_add((s.generated.len() - before) as u64, Relaxed);
        }
        snapshot(&mut running, &cache, sh.cfg.prefill_chunk);
        retire(sh, &mut running, &mut cache);
    }
}

/// Keeps a copy of each recurrent stream's state when it stands on a grid point: such state
/// cannot be cut back, so this is what the prompt cache retains when the stream leaves.
fn snapshot(running: &mut [Running], cache: &PromptCache, grid: usize) {
    if !cache.enabled() {
        return;
    }
    for s in running.iter_mut() {
        let len = s.state.len;
        let stale = s.snapshot.as_ref().is_none_or(|snap| snap.len != len);
        if !s.state.mamba.is_empty() && len > 0 && len % grid.max(1) == 0 && stale {
            s.snapshot = Some(s.state.clone());
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
        running.push(Running {
            req: p.req,
            sink: p.sink,
            state,
            prefilled: cached,
            cached,
            snapshot: None,
            generated: Vec::new(),
            pending: None,
            reserved_bytes: need,
            queued: p.queued_at.elapsed(),
            admitted_at: Instant::now(),
            first_token_at: None,
            outcome: None,
        });
    }
    sh.metrics.set_waiting(q.waiting.len());
    update_gauges(sh, running);
    true
}

/// Drops streams that are over, counting how each ended; the state of a stream that finished
/// or was cancelled goes to the prompt cache (a failed one's may be half-advanced: dropped).
fn retire(sh: &Shared, running: &mut Vec<Running>, cache: &mut PromptCache) {
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
            let tokens = s.consumed();
            if s.state.mamba.is_empty() {
                cache.insert(&tokens, s.state);
            } else if let Some(snap) = s.snapshot {
                cache.insert(&tokens, snap);
            }
        }
    }
    update_gauges(sh, running);
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
