//! `tensorfold receipts`: exactness receipts run against a server.

use super::serve;
use clap::{Parser, Subcommand};
use std::process::ExitCode;
use tf_server::client::Client;
use tf_server::drafts_receipt::{drafts, DraftsPlan};
use tf_server::receipts::{concurrency, ConcurrencyPlan};
use tf_server::resume_receipt::{resume, ResumePlan};

/// Arguments of `tensorfold receipts`.
#[derive(Parser)]
pub struct Args {
    #[command(subcommand)]
    pub which: Receipt,
}

/// Which receipt to run.
#[derive(Subcommand)]
pub enum Receipt {
    /// concurrent == solo: each request's tokens beside 1, 2, 4 and 8 others equal its solo
    /// run, greedy and seeded, chat and raw completions, prompts of different lengths.
    /// Exit 1 on any mismatch.
    ///
    /// Without --url, starts a server of its own on 127.0.0.1 (an ephemeral port) with MODEL
    /// (the default model if omitted).
    #[command(verbatim_doc_comment)]
    Concurrency(ConcurrencyArgs),
    /// resumed == fresh: each turn of multi-turn conversations (greedy and seeded, plain and
    /// tool turns) on a server with the prompt cache equals the same turn on a server with
    /// `--prompt-cache-gib 0` (same token_sha). Exit 1 on any mismatch.
    ///
    /// Without --url, starts both servers here on 127.0.0.1 with MODEL (the default model if
    /// omitted); with --url, --fresh-url must name the reference server (cache off).
    #[command(verbatim_doc_comment)]
    Resume(ResumeArgs),
    /// drafted == plain: each prompt (repetitive, code, prose), greedy and seeded, with drafts
    /// on equals the same request with `"draft": false` (same token_sha); prints the acceptance
    /// rate, tokens per forward and both wall times. Exit 1 on any mismatch.
    ///
    /// Without --url, starts a server here on 127.0.0.1 with MODEL (the default model if
    /// omitted). Requests run one at a time (the rates come from /metrics).
    #[command(verbatim_doc_comment)]
    Drafts(DraftsArgs),
}

/// Arguments of `tensorfold receipts drafts`.
#[derive(Parser)]
pub struct DraftsArgs {
    /// A running server (drafts on); without it, one is started here.
    #[arg(long)]
    pub url: Option<String>,
    /// API key for the server at --url.
    #[arg(long, env = "TENSORFOLD_API_KEY")]
    pub api_key: Option<String>,
    /// Tokens per reply (EOS is ignored so both runs have this many).
    #[arg(long, default_value_t = 64)]
    pub max_tokens: usize,
    /// Draft tokens per window of the server started here.
    #[arg(long, default_value_t = tf_engine::scheduler::DEFAULT_DRAFT_TOKENS)]
    pub draft_tokens: usize,
    /// Model for the server started here (ignored with --url).
    pub model: Option<String>,
    /// Worker threads of the server started here.
    #[arg(long)]
    pub threads: Option<usize>,
    /// Planted control: the server started here keeps the first drafted token unverified, so
    /// the receipt must fail (exit 1). Shows the receipt can fail.
    #[arg(long, hide = true)]
    pub planted_unverified_drafts: bool,
}

/// Arguments of `tensorfold receipts resume`.
#[derive(Parser)]
pub struct ResumeArgs {
    /// A running server with the prompt cache on; without it, both servers start here.
    #[arg(long, requires = "fresh_url")]
    pub url: Option<String>,
    /// The reference server, started with `--prompt-cache-gib 0`.
    #[arg(long, requires = "url")]
    pub fresh_url: Option<String>,
    /// API key for the servers at --url and --fresh-url.
    #[arg(long, env = "TENSORFOLD_API_KEY")]
    pub api_key: Option<String>,
    /// Turns per conversation.
    #[arg(long, default_value_t = 4)]
    pub turns: usize,
    /// Most tokens per reply.
    #[arg(long, default_value_t = 24)]
    pub max_tokens: usize,
    /// Model for the servers started here (ignored with --url).
    pub model: Option<String>,
    /// Worker threads of each server started here.
    #[arg(long)]
    pub threads: Option<usize>,
    /// Planted control: the cached server started here matches prefixes ignoring their
    /// tokens, so the receipt must fail (exit 1). Shows the receipt can fail.
    #[arg(long, hide = true)]
    pub planted_stale_cache: bool,
}

/// Arguments of `tensorfold receipts concurrency`.
#[derive(Parser)]
pub struct ConcurrencyArgs {
    /// A running server (`http://127.0.0.1:8080`); without it, one is started here.
    #[arg(long)]
    pub url: Option<String>,
    /// API key for the server at --url.
    #[arg(long, env = "TENSORFOLD_API_KEY")]
    pub api_key: Option<String>,
    /// Concurrency levels, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    pub streams: Vec<usize>,
    /// Tokens per reply (EOS is ignored so every reply has this many).
    #[arg(long, default_value_t = 16)]
    pub max_tokens: usize,
    /// Model for the server started here (ignored with --url).
    pub model: Option<String>,
    /// Worker threads of the server started here.
    #[arg(long)]
    pub threads: Option<usize>,
    /// Planted control: start the server here with cross-stream logit mixing, so the receipt
    /// must fail (exit 1). Shows the receipt can fail.
    #[arg(long, hide = true)]
    pub planted_crosstalk: bool,
}

/// Runs `tensorfold receipts`.
pub fn main(args: Args) -> anyhow::Result<ExitCode> {
    match args.which {
        Receipt::Concurrency(a) => run_concurrency(a),
        Receipt::Resume(a) => run_resume(a),
        Receipt::Drafts(a) => run_drafts(a),
    }
}

fn run_concurrency(a: ConcurrencyArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        !a.streams.is_empty() && a.streams.iter().all(|&n| (1..=64).contains(&n)),
        "--streams takes levels between 1 and 64"
    );
    anyhow::ensure!(a.max_tokens > 0, "--max-tokens must be at least 1");
    let most = a.streams.iter().copied().max().unwrap_or(1);
    let mut own = None;
    let (url, key) = match &a.url {
        Some(u) => (u.clone(), a.api_key.clone()),
        None => {
            let sargs = serve::Args {
                model: a.model.clone(),
                host: "127.0.0.1".into(),
                port: 0,
                parallel: most,
                queue: 64,
                context: None,
                max_tokens: None,
                threads: a.threads,
                backend: crate::model_args::Backend::Auto,
                api_keys: vec![],
                name: None,
                // Small chunks: longer prompts span several rounds shared with decode rows.
                prefill_chunk: 64,
                planted_crosstalk: a.planted_crosstalk,
                // Cache off: this receipt isolates batching (resume has its own receipt).
                prompt_cache_gib: Some(0.0),
                planted_stale_cache: false,
                no_drafts: false,
                draft_tokens: tf_engine::scheduler::DEFAULT_DRAFT_TOKENS,
                planted_unverified_drafts: false,
            };
            let server = serve::start(&sargs, false)?;
            let url = format!("http://{}", server.addr());
            eprintln!("started a server at {url}");
            own = Some(server);
            (url, None)
        }
    };
    let client = Client::new(&url, key);
    let plan = ConcurrencyPlan {
        levels: a.streams.clone(),
        max_tokens: a.max_tokens,
    };
    let report = concurrency(&client, &plan, |row| {
        eprintln!(
            "  {} streams, {} {}: {}/{}",
            row.streams, row.api, row.sampling, row.equal, row.total
        );
    })?;
    print!("{}", report.render());
    if let Some(s) = own {
        s.shutdown()?;
    }
    let (equal, total) = report.score();
    Ok(if equal == total {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn run_resume(a: ResumeArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(a.turns > 0, "--turns must be at least 1");
    anyhow::ensure!(a.max_tokens > 0, "--max-tokens must be at least 1");
    let mut own = Vec::new();
    let (cached, fresh) = match (&a.url, &a.fresh_url) {
        (Some(u), Some(f)) => (
            Client::new(u, a.api_key.clone()),
            Client::new(f, a.api_key.clone()),
        ),
        _ => {
            let mut urls = Vec::new();
            for (gib, planted) in [(1.0, a.planted_stale_cache), (0.0, false)] {
                let sargs = serve::Args {
                    model: a.model.clone(),
                    host: "127.0.0.1".into(),
                    port: 0,
                    parallel: 2,
                    queue: 64,
                    context: None,
                    max_tokens: None,
                    threads: a.threads,
                    backend: crate::model_args::Backend::Auto,
                    api_keys: vec![],
                    name: None,
                    // A fine grid: short chat turns still resume whole 16-token steps.
                    prefill_chunk: 16,
                    planted_crosstalk: false,
                    prompt_cache_gib: Some(gib),
                    planted_stale_cache: planted,
                    no_drafts: false,
                    draft_tokens: tf_engine::scheduler::DEFAULT_DRAFT_TOKENS,
                    planted_unverified_drafts: false,
                };
                let server = serve::start(&sargs, false)?;
                let url = format!("http://{}", server.addr());
                eprintln!("started a server at {url} (--prompt-cache-gib {gib})");
                urls.push(url);
                own.push(server);
            }
            (Client::new(&urls[0], None), Client::new(&urls[1], None))
        }
    };
    let plan = ResumePlan {
        turns: a.turns,
        max_tokens: a.max_tokens,
    };
    let report = resume(&cached, &fresh, &plan, |r| {
        eprintln!(
            "  {} turn {}: cached {} of {}: {}",
            r.conversation,
            r.turn,
            r.cached_tokens,
            r.prompt_tokens,
            if r.equal { "equal" } else { "MISMATCH" }
        );
    })?;
    print!("{}", report.render());
    for s in own {
        s.shutdown()?;
    }
    let (equal, total) = report.score();
    Ok(if equal == total && total > 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn run_drafts(a: DraftsArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(a.max_tokens > 0, "--max-tokens must be at least 1");
    anyhow::ensure!(a.draft_tokens > 0, "--draft-tokens must be at least 1");
    let mut own = None;
    let (url, key) = match &a.url {
        Some(u) => (u.clone(), a.api_key.clone()),
        None => {
            let sargs = serve::Args {
                model: a.model.clone(),
                host: "127.0.0.1".into(),
                port: 0,
                parallel: 1,
                queue: 64,
                context: None,
                max_tokens: None,
                threads: a.threads,
                backend: crate::model_args::Backend::Auto,
                api_keys: vec![],
                name: None,
                prefill_chunk: 64,
                planted_crosstalk: false,
                // Cache off: the drafted and the plain run both prefill from scratch.
                prompt_cache_gib: Some(0.0),
                planted_stale_cache: false,
                no_drafts: false,
                draft_tokens: a.draft_tokens,
                planted_unverified_drafts: a.planted_unverified_drafts,
            };
            let server = serve::start(&sargs, false)?;
            let url = format!("http://{}", server.addr());
            eprintln!(
                "started a server at {url} (--draft-tokens {})",
                a.draft_tokens
            );
            own = Some(server);
            (url, None)
        }
    };
    let client = Client::new(&url, key);
    let plan = DraftsPlan {
        max_tokens: a.max_tokens,
    };
    let report = drafts(&client, &plan, |r| {
        eprintln!(
            "  {} {}: accept {:.2}, {:.2} tok/fwd: {}",
            r.prompt,
            r.sampling,
            r.acceptance(),
            r.tokens_per_forward(),
            if r.equal { "equal" } else { "MISMATCH" }
        );
    })?;
    print!("{}", report.render());
    if let Some(s) = own {
        s.shutdown()?;
    }
    let (equal, total) = report.score();
    Ok(if equal == total && total > 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
