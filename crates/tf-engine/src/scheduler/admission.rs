//! Memory admission: weights, each stream's state grown to its own limit, and the workspace of
//! one round must fit in the budget.

use super::stream::StreamRequest;
use super::SchedulerConfig;
use tf_models::ModelInfo;

/// Why a request was not queued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// The prompt has no tokens.
    #[error("the prompt is empty: nothing to condition on")]
    EmptyPrompt,
    /// The prompt does not leave room for one generated token.
    #[error(
        "the prompt has {prompt} tokens but the model's context holds {context}: shorten the \
         prompt (or start the server with a larger --context, up to the model's own)"
    )]
    PromptTooLong { prompt: usize, context: usize },
    /// Every slot is busy and the queue is full.
    #[error(
        "the server is busy: {running} streams running (--parallel {parallel}) and {waiting} \
         waiting (the queue is full); retry shortly"
    )]
    QueueFull {
        running: usize,
        waiting: usize,
        parallel: usize,
    },
    /// The request could never fit in memory, even alone.
    #[error(
        "this request needs {need_mib} MiB of stream state ({tokens} tokens of prompt + \
         max_tokens at {bytes_per_token} bytes each) but only {room_mib} MiB are left for \
         streams; ask for at most {max_tokens_that_fit} max_tokens or a shorter prompt (or \
         lower TENSORFOLD_MEMORY_RESERVE_GIB)"
    )]
    NeverFits {
        need_mib: u64,
        tokens: usize,
        bytes_per_token: usize,
        room_mib: u64,
        max_tokens_that_fit: usize,
    },
    /// The memory budget does not even hold the weights and one round's workspace.
    #[error(
        "the memory budget ({budget_mib} MiB) does not hold the weights and one round's \
         workspace ({fixed_mib} MiB): free memory or lower TENSORFOLD_MEMORY_RESERVE_GIB"
    )]
    NoRoomForModel { budget_mib: u64, fixed_mib: u64 },
    /// The scheduler is not taking requests.
    #[error("{reason}")]
    Stopped { reason: String },
}

/// The byte accounting admission uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryPlan {
    /// Everything weights, states and workspace may use.
    pub budget_bytes: u64,
    /// Weight bytes.
    pub weight_bytes: u64,
    /// Activation workspace of the largest round (an estimate: each row's logits, plus scratch
    /// of four times its per-token state).
    pub workspace_bytes: u64,
    /// State bytes one more token of a stream costs.
    pub state_bytes_per_token: u64,
}

const MIB: u64 = 1 << 20;

impl MemoryPlan {
    /// The plan for `info` under `cfg`; refuses a budget that cannot hold the model.
    pub fn new(info: &ModelInfo, cfg: &SchedulerConfig) -> Result<MemoryPlan, SubmitError> {
        let rows = (cfg.parallel + cfg.round_prefill_tokens.max(cfg.prefill_chunk)) as u64;
        let per_row = info.vocab_size as u64 * 4 + info.state_bytes_per_token as u64 * 4;
        let plan = MemoryPlan {
            budget_bytes: cfg.memory_budget_bytes,
            weight_bytes: info.weight_bytes as u64,
            workspace_bytes: rows * per_row,
            state_bytes_per_token: info.state_bytes_per_token as u64,
        };
        if plan.fixed_bytes() > plan.budget_bytes {
            return Err(SubmitError::NoRoomForModel {
                budget_mib: plan.budget_bytes / MIB,
                fixed_mib: plan.fixed_bytes() / MIB,
            });
        }
        Ok(plan)
    }

    /// Weights plus workspace.
    pub fn fixed_bytes(&self) -> u64 {
        self.weight_bytes.saturating_add(self.workspace_bytes)
    }

    /// Bytes left for stream states.
    pub fn stream_room_bytes(&self) -> u64 {
        self.budget_bytes.saturating_sub(self.fixed_bytes())
    }

    /// Tokens a request's state may grow to: prompt + max_tokens, within the context.
    pub fn limit_tokens(req: &StreamRequest, context: usize) -> usize {
        req.prompt.len().saturating_add(req.max_tokens).min(context)
    }

    /// Bytes a request reserves: its state at its own limit.
    pub fn reserve_bytes(&self, req: &StreamRequest, context: usize) -> u64 {
        Self::limit_tokens(req, context) as u64 * self.state_bytes_per_token
    }

    /// Refuses a request that can never run.
    pub fn check(&self, req: &StreamRequest, info: &ModelInfo) -> Result<(), SubmitError> {
        if req.prompt.is_empty() {
            return Err(SubmitError::EmptyPrompt);
        }
        if req.prompt.len() >= info.context {
            return Err(SubmitError::PromptTooLong {
                prompt: req.prompt.len(),
                context: info.context,
            });
        }
        let need = self.reserve_bytes(req, info.context);
        let room = self.stream_room_bytes();
        if need > room {
            let fit_tokens = (room / self.state_bytes_per_token.max(1)) as usize;
            return Err(SubmitError::NeverFits {
                need_mib: need.div_ceil(MIB),
                tokens: Self::limit_tokens(req, info.context),
                bytes_per_token: info.state_bytes_per_token,
                room_mib: room / MIB,
                max_tokens_that_fit: fit_tokens.saturating_sub(req.prompt.len()),
            });
        }
        Ok(())
    }
}

/// The memory budget of this machine: total memory minus `TENSORFOLD_MEMORY_RESERVE_GIB`
/// (default 1 GiB); None when /proc/meminfo cannot be read.
pub fn system_budget_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    let reserve_gib: f64 = std::env::var("TENSORFOLD_MEMORY_RESERVE_GIB")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|v: &f64| v.is_finite() && *v >= 0.0)
        .unwrap_or(1.0);
    Some((kib * 1024).saturating_sub((reserve_gib * (1u64 << 30) as f64) as u64))
}
