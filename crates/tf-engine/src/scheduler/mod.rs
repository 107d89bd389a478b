//! The scheduler: one thread owns the model and every running stream, and runs rounds.
//!
//! Each round gathers one decode row per stream that has a token to feed, plus whole prompt
//! chunks of streams still being prefilled (chunks lie on a grid of `C` tokens restarted at
//! every chat message start, [`crate::prompt_cache::ChunkPlan`], so a prompt's chunk plan
//! depends only on its tokens), runs one forward, and
//! samples each stream from its own logits with the keyed sampler at the stream's absolute
//! position. Requests join at the next round; finished or cancelled ones (the receiver of
//! their events is gone) leave and free their state. Because every kernel is row-invariant and
//! the sampler sees only its stream's logits, seed and position, a stream's tokens are the
//! same alone or beside others (concurrent == solo).

mod admission;
mod draft;
mod engine;
mod metrics;
mod stream;
#[cfg(test)]
mod tests;

pub use admission::{system_budget_bytes, MemoryPlan, SubmitError};
pub use draft::propose as propose_draft;
pub use metrics::{Metrics, Snapshot};
pub use stream::{EventSink, Finished, StreamEvent, StreamRequest, TokenEvent, TokenLogprob};

use crate::generate::PREFILL_CHUNK;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use tf_models::{Model, ModelInfo};

/// Drafted tokens verified per round by default.
pub const DEFAULT_DRAFT_TOKENS: usize = 4;

/// How the scheduler runs rounds and admits streams.
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// Most streams running at once.
    pub parallel: usize,
    /// Most requests waiting for a slot; beyond it submissions are refused.
    pub queue: usize,
    /// Prefill chunk grid: prompt rows go in chunks of `C`, counted from the prompt's start and
    /// from every message start (`message_marker`).
    pub prefill_chunk: usize,
    /// The token sequence that opens a chat message (from the chat template, see
    /// `tf_tokenize::message_marker`); the chunk grid restarts at each occurrence, so prompt
    /// cache resume points (and recurrent snapshots) fall on message starts. Empty: the plain
    /// grid `k·C`.
    pub message_marker: Vec<u32>,
    /// The token that closes every chat message (`tf_tokenize::message_end_token`); every
    /// position holding it is a chunk boundary, so a reply that stopped on it resumes whole
    /// in the next turn (recurrent state included). None: no such boundaries.
    pub message_end_token: Option<u32>,
    /// Prompt rows one round takes (at least one chunk), so decode rows keep moving.
    pub round_prefill_tokens: usize,
    /// Bytes weights, stream states and workspace may use together.
    pub memory_budget_bytes: u64,
    /// Serve a shorter context than the model's own (None: the model's).
    pub context: Option<usize>,
    /// Bytes the prompt cache may hold (retained conversation prefixes; 0 disables it).
    pub prompt_cache_bytes: u64,
    /// Most drafted tokens verified per stream per round (0 disables drafting).
    pub draft_tokens: usize,
    /// Tokens of a stream's tail a context copy must match (at least 1).
    pub draft_match_tokens: usize,
    /// Planted control for the drafts receipt: the first drafted token is kept without being
    /// checked against the keyed sample, so drafted != plain. Never set outside tests.
    pub planted_unverified_drafts: bool,
    /// Planted control for the concurrency receipt: when set, a stream's logits are mixed with
    /// another stream's in the same round, a deliberate batch-dependence the receipt must catch.
    /// Never set outside tests.
    pub planted_crosstalk: bool,
    /// Planted control for the resume receipt: the prompt cache matches prefixes by length,
    /// ignoring their tokens, so resumed != fresh. Never set outside tests.
    pub planted_cache_ignores_tokens: bool,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            parallel: 8,
            queue: 64,
            prefill_chunk: PREFILL_CHUNK,
            message_marker: Vec::new(),
            message_end_token: None,
            round_prefill_tokens: PREFILL_CHUNK,
            memory_budget_bytes: u64::MAX,
            context: None,
            prompt_cache_bytes: 0,
            draft_tokens: DEFAULT_DRAFT_TOKENS,
            draft_match_tokens: draft::MATCH_TOKENS,
            planted_unverified_drafts: false,
            planted_crosstalk: false,
            planted_cache_ignores_tokens: false,
        }
    }
}

/// A request accepted but not yet running.
struct Pending {
    req: StreamRequest,
    sink: Box<dyn EventSink>,
    queued_at: std::time::Instant,
}

/// State shared by the handles and the scheduler thread.
struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
    metrics: Metrics,
    info: ModelInfo,
    plan: MemoryPlan,
    cfg: SchedulerConfig,
}

#[derive(Default)]
struct Queue {
    waiting: VecDeque<Pending>,
    next_id: u64,
    stopping: bool,
}

/// The running scheduler; dropping it (or [`Scheduler::shutdown`]) stops the thread.
pub struct Scheduler {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// A cheap, clonable way to submit requests and read the scheduler's state.
#[derive(Clone)]
pub struct SchedulerHandle {
    shared: Arc<Shared>,
}

impl Scheduler {
    /// Starts the scheduler thread, which owns `model` from now on.
    pub fn start(model: Box<dyn Model>, cfg: SchedulerConfig) -> Result<Scheduler, SubmitError> {
        let mut info = model.info().clone();
        if let Some(c) = cfg.context {
            info.context = info.context.min(c.max(2));
        }
        let plan = MemoryPlan::new(&info, &cfg)?;
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            metrics: Metrics::default(),
            info,
            plan,
            cfg,
        });
        let inner = shared.clone();
        let thread = std::thread::Builder::new()
            .name("tf-scheduler".into())
            .spawn(move || engine::run(model, &inner))
            .map_err(|e| SubmitError::Stopped {
                reason: format!("could not start the scheduler thread: {e}"),
            })?;
        Ok(Scheduler {
            shared,
            thread: Some(thread),
        })
    }

    /// A handle for submitting requests.
    pub fn handle(&self) -> SchedulerHandle {
        SchedulerHandle {
            shared: self.shared.clone(),
        }
    }

    /// Stops taking requests, lets running and waiting streams finish, and joins the thread.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Ok(mut q) = self.shared.queue.lock() {
            q.stopping = true;
        }
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        self.stop();
    }
}

impl SchedulerHandle {
    /// Queues a request; its events go to `sink`. Refuses at once what can never run (empty,
    /// past the context, too big for memory) and what the queue has no room for.
    pub fn submit(&self, req: StreamRequest, sink: Box<dyn EventSink>) -> Result<u64, SubmitError> {
        let sh = &self.shared;
        sh.plan.check(&req, &sh.info)?;
        let mut q = sh.queue.lock().map_err(|_| SubmitError::Stopped {
            reason: "the scheduler thread failed".into(),
        })?;
        if q.stopping {
            return Err(SubmitError::Stopped {
                reason: "the server is shutting down".into(),
            });
        }
        if q.waiting.len() >= sh.cfg.queue {
            sh.metrics
                .rejected
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Err(SubmitError::QueueFull {
                running: sh.metrics.snapshot().running,
                waiting: q.waiting.len(),
                parallel: sh.cfg.parallel,
            });
        }
        let id = q.next_id;
        q.next_id += 1;
        q.waiting.push_back(Pending {
            req,
            sink,
            queued_at: std::time::Instant::now(),
        });
        sh.metrics.set_waiting(q.waiting.len());
        drop(q);
        sh.wake.notify_all();
        Ok(id)
    }

    /// Facts about the served model.
    pub fn info(&self) -> &ModelInfo {
        &self.shared.info
    }

    /// The memory plan (budget, weights, workspace, per-token state).
    pub fn memory(&self) -> &MemoryPlan {
        &self.shared.plan
    }

    /// The configuration the scheduler runs with.
    pub fn config(&self) -> &SchedulerConfig {
        &self.shared.cfg
    }

    /// Counters and gauges now.
    pub fn snapshot(&self) -> Snapshot {
        self.shared.metrics.snapshot()
    }
}
