//! The drafts receipt: each request with drafts on (`"draft": true`, the default) returns the
//! same tokens (`tensorfold.token_sha`) as the same request with `"draft": false` (the serial
//! reference), greedy and seeded, on repetitive and non-repetitive prompts. It also reports the
//! acceptance rate and tokens per forward (from the server's /metrics counters, so requests run
//! one at a time) and the wall time of both runs.

use crate::client::{token_sha, Client, ClientError};
use serde_json::{json, Value};
use std::time::Instant;

/// What to run.
#[derive(Debug, Clone)]
pub struct DraftsPlan {
    /// Tokens per reply (EOS is ignored so both runs have this many).
    pub max_tokens: usize,
}

/// One prompt under one sampling, drafted and plain.
#[derive(Debug, Clone, PartialEq)]
pub struct DraftRow {
    /// "repetitive", "code", "prose", ...
    pub prompt: String,
    /// "greedy" or "seeded".
    pub sampling: String,
    pub equal: bool,
    pub completion_tokens: u64,
    /// Drafted tokens verified, and kept, during the drafted run.
    pub proposed: u64,
    pub accepted: u64,
    /// Decode steps of the drafted run (a verified window counts once).
    pub steps: u64,
    /// Wall seconds of the drafted and the plain run.
    pub drafted_s: f64,
    pub plain_s: f64,
}

impl DraftRow {
    /// Kept drafted tokens over verified ones (0 when none were drafted).
    pub fn acceptance(&self) -> f64 {
        ratio(self.accepted, self.proposed)
    }

    /// Tokens generated per decode step of the drafted run.
    pub fn tokens_per_forward(&self) -> f64 {
        ratio(self.completion_tokens, self.steps)
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// The receipt's result.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DraftsReport {
    pub rows: Vec<DraftRow>,
}

impl DraftsReport {
    /// (equal, total) over every row.
    pub fn score(&self) -> (usize, usize) {
        let e = self.rows.iter().filter(|r| r.equal).count();
        (e, self.rows.len())
    }

    /// The table and the verdict line.
    pub fn render(&self) -> String {
        let mut out = format!(
            "{:<11} {:<7} {:>6} {:>9} {:>9} {:>9} {:>9} {:>7}  {}\n",
            "prompt",
            "sampling",
            "tokens",
            "accept",
            "tok/fwd",
            "drafted_s",
            "plain_s",
            "speedup",
            "drafted == plain"
        );
        for r in &self.rows {
            out.push_str(&format!(
                "{:<11} {:<7} {:>6} {:>9.2} {:>9.2} {:>9.3} {:>9.3} {:>7.2}  {}\n",
                r.prompt,
                r.sampling,
                r.completion_tokens,
                r.acceptance(),
                r.tokens_per_forward(),
                r.drafted_s,
                r.plain_s,
                if r.drafted_s > 0.0 {
                    r.plain_s / r.drafted_s
                } else {
                    0.0
                },
                if r.equal { "equal" } else { "MISMATCH" }
            ));
        }
        let (e, t) = self.score();
        out.push_str(&format!("drafted == plain: {e}/{t}\n"));
        out
    }
}

const PROMPTS: [(&str, &str); 3] = [
    (
        "repetitive",
        "Repeat this line exactly five times, one per line: the quick brown fox jumps over the lazy dog.",
    ),
    (
        "code",
        "Write a Python function that prints the numbers 1 to 20, each with its square, using a list of tuples.",
    ),
    (
        "prose",
        "Describe a walk through an autumn forest at dawn, with colours, sounds and smells.",
    ),
];

/// Counters read from /metrics: (proposed, accepted, decode steps).
fn counters(client: &Client) -> Result<(u64, u64, u64), ClientError> {
    let text = client.get_text("/metrics")?;
    let read = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
            .unwrap_or(0.0) as u64
    };
    Ok((
        read("tensorfold_draft_proposed_total "),
        read("tensorfold_draft_accepted_total "),
        read("tensorfold_decode_steps_total "),
    ))
}

fn ask(client: &Client, body: &Value) -> Result<(String, u64, f64), ClientError> {
    let t = Instant::now();
    let v = client.post("/v1/chat/completions", body)?;
    let secs = t.elapsed().as_secs_f64();
    let sha = token_sha(&v).ok_or_else(|| ClientError::Protocol {
        url: "/v1/chat/completions".into(),
        message: "the reply has no tensorfold.token_sha".into(),
    })?;
    let n = v
        .pointer("/usage/completion_tokens")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    Ok((sha, n, secs))
}

/// Runs the receipt against one server: each prompt and sampling drafted, then plain
/// (`"draft": false`); `progress` sees each row. Requests run one at a time.
pub fn drafts(
    client: &Client,
    plan: &DraftsPlan,
    mut progress: impl FnMut(&DraftRow),
) -> Result<DraftsReport, ClientError> {
    let mut report = DraftsReport::default();
    for (name, text) in PROMPTS {
        for (sampling, seed) in [("greedy", None), ("seeded", Some(1234u64))] {
            let mut body = json!({
                "messages": [{"role": "user", "content": text}],
                "max_tokens": plan.max_tokens,
                "ignore_eos": true,
                "temperature": if seed.is_some() { 0.7 } else { 0.0 },
            });
            if let Some(s) = seed {
                body["seed"] = json!(s);
            }
            let before = counters(client)?;
            let (sha_d, n, drafted_s) = ask(client, &body)?;
            let after = counters(client)?;
            body["draft"] = json!(false);
            let (sha_p, _, plain_s) = ask(client, &body)?;
            let row = DraftRow {
                prompt: name.to_string(),
                sampling: sampling.to_string(),
                equal: sha_d == sha_p,
                completion_tokens: n,
                proposed: after.0.saturating_sub(before.0),
                accepted: after.1.saturating_sub(before.1),
                steps: after.2.saturating_sub(before.2),
                drafted_s,
                plain_s,
            };
            progress(&row);
            report.rows.push(row);
        }
    }
    Ok(report)
}
