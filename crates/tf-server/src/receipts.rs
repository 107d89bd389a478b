//! The concurrency receipt: each request's tokens under concurrency equal its solo run.
//!
//! For each combination of API (chat, raw completion) and sampling (greedy, seeded), every
//! prompt (different lengths) is first run alone; then, for each level N, N requests with the
//! first N prompts run at once (half streamed, half whole). Each concurrent reply's
//! `tensorfold.token_sha` must equal its solo one.

use crate::client::{stream_token_sha, token_sha, Client, ClientError};
use serde_json::{json, Value};
use std::time::Instant;

/// What to run.
#[derive(Debug, Clone)]
pub struct ConcurrencyPlan {
    /// Concurrency levels.
    pub levels: Vec<usize>,
    /// Tokens per reply (EOS is ignored, so every reply has exactly this many).
    pub max_tokens: usize,
}

impl Default for ConcurrencyPlan {
    fn default() -> Self {
        ConcurrencyPlan {
            levels: vec![1, 2, 4, 8],
            max_tokens: 16,
        }
    }
}

/// One row of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceiptRow {
    pub streams: usize,
    pub api: &'static str,
    pub sampling: &'static str,
    pub equal: usize,
    pub total: usize,
    /// Generated tokens per second over the level's wall time (all its streams together).
    pub tokens_per_s: f64,
    /// Prompts whose concurrent reply differed from the solo one.
    pub mismatches: Vec<usize>,
}

/// The receipt's result.
#[derive(Debug, Clone, PartialEq)]
pub struct ConcurrencyReport {
    pub rows: Vec<ReceiptRow>,
}

impl ConcurrencyReport {
    /// (equal, total) over every row.
    pub fn score(&self) -> (usize, usize) {
        self.rows
            .iter()
            .fold((0, 0), |(e, t), r| (e + r.equal, t + r.total))
    }

    /// The table and the verdict line.
    pub fn render(&self) -> String {
        let mut out = format!(
            "{:>7}  {:<5}  {:<7}  {:>9}  {:>9}\n",
            "streams", "api", "sampling", "equal", "tok/s"
        );
        for r in &self.rows {
            out.push_str(&format!(
                "{:>7}  {:<5}  {:<7}  {:>9}  {:>9.1}{}\n",
                r.streams,
                r.api,
                r.sampling,
                format!("{}/{}", r.equal, r.total),
                r.tokens_per_s,
                if r.mismatches.is_empty() {
                    String::new()
                } else {
                    format!("  MISMATCH prompts {:?}", r.mismatches)
                }
            ));
        }
        let (e, t) = self.score();
        out.push_str(&format!("concurrent == solo: {e}/{t}\n"));
        out
    }
}

/// Prompt `i` (0..8): lengths grow by ~30 tokens per step, from ~10 to ~220.
fn prompt_text(i: usize) -> String {
    const TOPICS: [&str; 8] = [
        "the sea",
        "a lighthouse",
        "bread",
        "winter mornings",
        "old maps",
        "bees",
        "a violin",
        "the moon",
    ];
    let mut s = format!("Write a few sentences about {}.", TOPICS[i % 8]);
    for k in 0..(i * 3) {
        s.push_str(&format!(" Detail {k}: keep it simple and concrete."));
    }
    s
}

fn body(api: &str, sampling: &str, i: usize, max_tokens: usize, stream: bool) -> Value {
    let mut b = json!({
        "max_tokens": max_tokens,
        "ignore_eos": true,
        "stream": stream,
        "temperature": if sampling == "greedy" { 0.0 } else { 0.8 },
        "top_p": 0.95,
    });
    if sampling == "seeded" {
        b["seed"] = json!(1000 + i);
    }
    if api == "chat" {
        b["messages"] = json!([{"role": "user", "content": prompt_text(i)}]);
    } else {
        b["prompt"] = json!(prompt_text(i));
    }
    b
}

fn path(api: &str) -> &'static str {
    if api == "chat" {
        "/v1/chat/completions"
    } else {
        "/v1/completions"
    }
}

/// Runs one request; returns its token_sha and completion tokens.
fn one(
    client: &Client,
    api: &str,
    sampling: &str,
    i: usize,
    plan: &ConcurrencyPlan,
    stream: bool,
) -> Result<(String, usize), ClientError> {
    let b = body(api, sampling, i, plan.max_tokens, stream);
    let missing = || ClientError::Protocol {
        url: path(api).into(),
        message: "the reply has no tensorfold.token_sha".into(),
    };
    if stream {
        let chunks = client.post_stream(path(api), &b)?;
        Ok((
            stream_token_sha(&chunks).ok_or_else(missing)?,
            plan.max_tokens,
        ))
    } else {
        let v = client.post(path(api), &b)?;
        let n = v
            .pointer("/usage/completion_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0) as usize;
        Ok((token_sha(&v).ok_or_else(missing)?, n))
    }
}

/// Runs the receipt against the server `client` talks to; `progress` sees each finished row.
pub fn concurrency(
    client: &Client,
    plan: &ConcurrencyPlan,
    mut progress: impl FnMut(&ReceiptRow),
) -> Result<ConcurrencyReport, ClientError> {
    let most = plan.levels.iter().copied().max().unwrap_or(1);
    let mut rows = Vec::new();
    for api in ["chat", "raw"] {
        for sampling in ["greedy", "seeded"] {
            let solo: Vec<String> = (0..most)
                .map(|i| one(client, api, sampling, i, plan, false).map(|r| r.0))
                .collect::<Result<_, _>>()?;
            for &n in &plan.levels {
                let start = Instant::now();
                let results: Vec<Result<(String, usize), ClientError>> = std::thread::scope(|s| {
                    let handles: Vec<_> = (0..n)
                        .map(|i| s.spawn(move || one(client, api, sampling, i, plan, i % 2 == 1)))
                        .collect();
                    handles
                        .into_iter()
                        .map(|h| {
                            h.join().unwrap_or_else(|_| {
                                Err(ClientError::Protocol {
                                    url: path(api).into(),
                                    message: "a request thread panicked".into(),
                                })
                            })
                        })
                        .collect()
                });
                let secs = start.elapsed().as_secs_f64();
                let mut mismatches = Vec::new();
                let mut tokens = 0;
                for (i, r) in results.into_iter().enumerate() {
                    let (sha, n_tok) = r?;
                    tokens += n_tok;
                    if sha != solo[i] {
                        mismatches.push(i);
                    }
                }
                let row = ReceiptRow {
                    streams: n,
                    api,
                    sampling,
                    equal: n - mismatches.len(),
                    total: n,
                    tokens_per_s: tokens as f64 / secs.max(1e-9),
                    mismatches,
                };
                progress(&row);
                rows.push(row);
            }
        }
    }
    Ok(ConcurrencyReport { rows })
}
