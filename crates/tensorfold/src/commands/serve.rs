//! `tensorfold serve`: the OpenAI-compatible server.

use crate::model_args::{load_model, Backend};
use clap::Parser;
use std::process::ExitCode;
use tf_cuda::backend::CudaOptions;
use tf_engine::generate::PREFILL_CHUNK;
use tf_engine::scheduler::{system_budget_bytes, SchedulerConfig};
use tf_server::{ModelText, Server, ServerOptions};

/// Serve a model over the OpenAI-compatible HTTP API.
///
/// Endpoints: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health,
/// GET /metrics (Prometheus). Streams share rounds (continuous batching), and a reply's tokens
/// are the same however many others ran beside it; every reply carries
/// `tensorfold.token_sha` so runs can be compared (`tensorfold receipts concurrency`).
///
/// Examples:
///   tensorfold serve                                  # the default model on 127.0.0.1:8080
///   tensorfold serve model.gguf --port 9000 --parallel 4
///   curl http://127.0.0.1:8080/v1/chat/completions -H 'content-type: application/json' \
///     -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":32}'
///
/// Memory: admission counts the weights, each stream's KV cache grown to its own limit
/// (prompt + max_tokens) and one round's workspace, within total memory minus
/// TENSORFOLD_MEMORY_RESERVE_GIB (default 1).
#[derive(Parser)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// Model to serve (GGUF file, safetensors directory, or owner/name); default model if omitted.
    pub model: Option<String>,
    /// Address to bind; keep 127.0.0.1 unless you mean to expose the server.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0 picks a free one, printed at start).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Most streams generating at once; more wait in a queue.
    #[arg(long, default_value_t = 8)]
    pub parallel: usize,
    /// Most requests waiting for a slot; beyond it requests get 429.
    #[arg(long, default_value_t = 64)]
    pub queue: usize,
    /// Context length to serve (at most the model's own; smaller saves memory per stream).
    #[arg(long)]
    pub context: Option<usize>,
    /// Cap on max_tokens per request (also the default when a request gives none).
    #[arg(long)]
    pub max_tokens: Option<usize>,
    /// Worker threads for the kernels (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Where the forward pass runs: auto (CUDA when a usable GPU is present and the model
    /// has a CUDA path, else the CPU), cpu, or cuda (exit 2 when the GPU cannot take it).
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    pub backend: Backend,
    /// Accept only requests with `Authorization: Bearer KEY` on /v1 (repeat for several keys).
    #[arg(long = "api-key", env = "TENSORFOLD_API_KEY")]
    pub api_keys: Vec<String>,
    /// The model id clients see (default: the model file or directory name).
    #[arg(long)]
    pub name: Option<String>,
    /// Prompt rows per prefill chunk (a fixed grid; smaller keeps running replies moving).
    #[arg(long, default_value_t = PREFILL_CHUNK)]
    pub prefill_chunk: usize,
    /// Planted control for receipts tests: mixes streams' logits within a round so that
    /// concurrent != solo. Never use it to serve.
    #[arg(long, hide = true)]
    pub planted_crosstalk: bool,
    /// GiB the prompt cache may hold (retained conversation prefixes, resumed exactly on the
    /// prefill grid); 0 disables it. Default: a quarter of the memory available at start,
    /// at most 8 GiB.
    #[arg(long)]
    pub prompt_cache_gib: Option<f64>,
    /// Planted control for `receipts resume`: the prompt cache matches prefixes by length,
    /// ignoring their tokens, so resumed != fresh. Never use it to serve.
    #[arg(long, hide = true)]
    pub planted_stale_cache: bool,
    /// Serve without drafts (the serial reference; the tokens are the same either way).
    #[arg(long)]
    pub no_drafts: bool,
    /// Most context-copy draft tokens verified per stream per round.
    #[arg(long, default_value_t = tf_engine::scheduler::DEFAULT_DRAFT_TOKENS)]
    pub draft_tokens: usize,
    /// Planted control for `receipts drafts`: the first drafted token is kept unverified, so
    /// drafted != plain. Never use it to serve.
    #[arg(long, hide = true)]
    pub planted_unverified_drafts: bool,
}

/// The scheduler configuration these arguments ask for.
// The struct update keeps this building while others add scheduler settings.
#[allow(clippy::needless_update)]
pub fn scheduler_config(args: &Args) -> anyhow::Result<SchedulerConfig> {
    anyhow::ensure!(args.parallel > 0, "--parallel must be at least 1");
    anyhow::ensure!(args.prefill_chunk > 0, "--prefill-chunk must be at least 1");
    Ok(SchedulerConfig {
        parallel: args.parallel,
        queue: args.queue,
        prefill_chunk: args.prefill_chunk,
        round_prefill_tokens: args.prefill_chunk,
        memory_budget_bytes: system_budget_bytes().unwrap_or(u64::MAX),
        context: args.context,
        planted_crosstalk: args.planted_crosstalk,
        prompt_cache_bytes: prompt_cache_bytes(args.prompt_cache_gib)?,
        planted_cache_ignores_tokens: args.planted_stale_cache,
        draft_tokens: if args.no_drafts { 0 } else { args.draft_tokens },
        planted_unverified_drafts: args.planted_unverified_drafts,
        ..SchedulerConfig::default()
    })
}

/// The prompt cache's byte budget: `--prompt-cache-gib`, or a quarter of the memory available
/// now (at most 8 GiB; 0 when it cannot be read).
fn prompt_cache_bytes(gib: Option<f64>) -> anyhow::Result<u64> {
    match gib {
        Some(g) => {
            anyhow::ensure!(
                g.is_finite() && g >= 0.0,
                "--prompt-cache-gib takes a size in GiB, 0 or more (0 disables the cache)"
            );
            Ok((g * (1u64 << 30) as f64) as u64)
        }
        None => Ok(tf_engine::prompt_cache::default_budget_bytes()),
    }
}

/// Loads the model and starts a server (not waiting for it).
pub fn start(args: &Args, log: bool) -> anyhow::Result<Server> {
    let path = tf_hub::resolve_model(args.model.as_deref(), true)?;
    let text = ModelText::load(&path)?;
    let gpu = CudaOptions {
        slots: args.parallel,
        context: args.context,
        max_rows: args.prefill_chunk.max(args.parallel),
        ..CudaOptions::default()
    };
    let model = load_model(&path, args.backend, args.threads, &gpu)?;
    let name = args.name.clone().unwrap_or_else(|| {
        let stem = path
            .file_stem()
            .or(path.file_name())
            .map(|s| s.to_string_lossy().into_owned());
        stem.unwrap_or_else(|| "model".into())
    });
    let server = Server::start(
        model,
        text,
        ServerOptions {
            addr: format!("{}:{}", args.host, args.port),
            name,
            api_keys: args.api_keys.clone(),
            max_tokens: args.max_tokens,
            scheduler: scheduler_config(args)?,
            log_requests: log,
            live_display: log,
        },
    )?;
    Ok(server)
}

/// Runs `tensorfold serve`.
pub fn main(args: Args) -> anyhow::Result<ExitCode> {
    let server = start(&args, true)?;
    eprintln!(
        "serving on http://{} (OpenAI API at /v1; Ctrl-C to stop)",
        server.addr()
    );
    server.wait()?;
    Ok(ExitCode::SUCCESS)
}
