//! The resume receipt: each turn of a multi-turn conversation on a server with the prompt
//! cache equals the same turn on a server without it (`--prompt-cache-gib 0`): the same
//! `tensorfold.token_sha`. Conversations: greedy and seeded plain turns, and a tool turn (an
//! assistant tool call and its result) where the chat template accepts tools.

use crate::client::{token_sha, Client, ClientError};
use serde_json::{json, Value};

/// What to run.
#[derive(Debug, Clone)]
pub struct ResumePlan {
    /// Turns per conversation.
    pub turns: usize,
    /// Tokens per reply (EOS ends a reply earlier).
    pub max_tokens: usize,
}

impl Default for ResumePlan {
    fn default() -> Self {
        ResumePlan {
            turns: 4,
            max_tokens: 24,
        }
    }
}

/// One turn of one conversation.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnRow {
    /// "greedy", "seeded", "tools-greedy", ...
    pub conversation: String,
    /// 0-based turn.
    pub turn: usize,
    pub prompt_tokens: u64,
    /// Prompt tokens the cached server resumed.
    pub cached_tokens: u64,
    pub equal: bool,
}

/// The receipt's result.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ResumeReport {
    pub rows: Vec<TurnRow>,
    /// Conversations skipped, with the reason (a template without tools).
    pub skipped: Vec<String>,
}

impl ResumeReport {
    /// (equal, total) over every turn.
    pub fn score(&self) -> (usize, usize) {
        let e = self.rows.iter().filter(|r| r.equal).count();
        (e, self.rows.len())
    }

    /// Turns after the first of their conversation that resumed something from the cache.
    pub fn resumed_turns(&self) -> usize {
        self.rows
            .iter()
            .filter(|r| r.turn > 0 && r.cached_tokens > 0)
            .count()
    }

    /// Prompt tokens resumed from the cache over every turn.
    pub fn cached_tokens(&self) -> u64 {
        self.rows.iter().map(|r| r.cached_tokens).sum()
    }

    /// The table and the verdict line.
    pub fn render(&self) -> String {
        let mut out = format!(
            "{:<14}  {:>4}  {:>6}  {:>6}  {}\n",
            "conversation", "turn", "prompt", "cached", "resumed == fresh"
        );
        for r in &self.rows {
            out.push_str(&format!(
                "{:<14}  {:>4}  {:>6}  {:>6}  {}\n",
                r.conversation,
                r.turn,
                r.prompt_tokens,
                r.cached_tokens,
                if r.equal { "equal" } else { "MISMATCH" }
            ));
        }
        for s in &self.skipped {
            out.push_str(&format!("skipped: {s}\n"));
        }
        let (e, t) = self.score();
        out.push_str(&format!(
            "turns that resumed a cached prefix: {}\nresumed == fresh: {e}/{t}\n",
            self.resumed_turns()
        ));
        out
    }
}

/// The messages a receipt's conversations are made of.
#[derive(Debug, Clone, PartialEq)]
pub struct Script {
    /// The system message every conversation starts with.
    pub system: String,
    /// User messages, one per turn (cycled).
    pub user_turns: Vec<String>,
    /// The user message a tool conversation starts with.
    pub tool_question: String,
    /// The tool's result in a tool conversation.
    pub tool_result: String,
}

impl Default for Script {
    fn default() -> Self {
        Script {
            system: "You are a concise assistant. Answer in plain sentences.".into(),
            user_turns: [
                "Tell me about lighthouses in a few sentences.",
                "Why were they painted in stripes?",
                "Now summarise what you said in one line.",
                "Name three famous ones.",
                "Which is the oldest?",
                "Thanks. One more fact, please.",
            ]
            .map(String::from)
            .to_vec(),
            tool_question: "What is the weather in Oslo?".into(),
            tool_result: "{\"temp_c\": 4, \"sky\": \"overcast\"}".into(),
        }
    }
}

impl Script {
    /// Short plain-ASCII messages, for models with a small context (the test fixtures).
    pub fn brief() -> Script {
        Script {
            system: "Be brief.".into(),
            user_turns: ["Hi.", "Why?", "More.", "Ok.", "And?", "Bye."]
                .map(String::from)
                .to_vec(),
            tool_question: "Oslo?".into(),
            tool_result: "{\"t\": 4}".into(),
        }
    }
}

fn weather_tool() -> Value {
    json!([{"type": "function", "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}}])
}

struct Turn {
    sha: String,
    content: String,
    prompt_tokens: u64,
    cached_tokens: u64,
}

fn ask(client: &Client, body: &Value) -> Result<Turn, ClientError> {
    let v = client.post("/v1/chat/completions", body)?;
    let sha = token_sha(&v).ok_or_else(|| ClientError::Protocol {
        url: "/v1/chat/completions".into(),
        message: "the reply has no tensorfold.token_sha".into(),
    })?;
    let num = |p: &str| v.pointer(p).and_then(Value::as_u64).unwrap_or(0);
    Ok(Turn {
        sha,
        content: v
            .pointer("/choices/0/message/content")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        prompt_tokens: num("/usage/prompt_tokens"),
        cached_tokens: num("/usage/prompt_tokens_details/cached_tokens"),
    })
}

/// One conversation's identity: its name, seed (None: greedy) and whether it uses tools.
struct Conversation<'a> {
    name: &'a str,
    seed: Option<u64>,
    tools: bool,
}

/// Runs one conversation; each turn goes to `cached` and then to `fresh`.
fn conversation(
    (cached, fresh): (&Client, &Client),
    c: &Conversation,
    plan: &ResumePlan,
    script: &Script,
    rows: &mut Vec<TurnRow>,
    progress: &mut impl FnMut(&TurnRow),
) -> Result<(), ClientError> {
    let (name, seed, tools) = (c.name, c.seed, c.tools);
    let mut messages = vec![json!({"role": "system", "content": script.system})];
    if tools {
        messages.push(json!({"role": "user", "content": script.tool_question}));
        messages.push(json!({"role": "assistant", "content": "", "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": "call_1",
            "content": script.tool_result}));
    }
    for turn in 0..plan.turns {
        if !(tools && turn == 0) {
            let text = script
                .user_turns
                .get(turn % script.user_turns.len().max(1))
                .map_or("Go on.", String::as_str);
            messages.push(json!({"role": "user", "content": text}));
        }
        let mut body = json!({
            "messages": messages,
            "max_tokens": plan.max_tokens,
            "temperature": if seed.is_some() { 0.8 } else { 0.0 },
        });
        if let Some(s) = seed {
            body["seed"] = json!(s);
        }
        if tools {
            body["tools"] = weather_tool();
        }
        let a = ask(cached, &body)?;
        let b = ask(fresh, &body)?;
        let row = TurnRow {
            conversation: name.to_string(),
            turn,
            prompt_tokens: a.prompt_tokens,
            cached_tokens: a.cached_tokens,
            equal: a.sha == b.sha,
        };
        progress(&row);
        rows.push(row);
        messages.push(json!({"role": "assistant", "content": a.content}));
    }
    Ok(())
}

/// Runs the receipt: `cached` is a server with the prompt cache, `fresh` one with
/// `--prompt-cache-gib 0`; `progress` sees each turn.
pub fn resume(
    cached: &Client,
    fresh: &Client,
    plan: &ResumePlan,
    progress: impl FnMut(&TurnRow),
) -> Result<ResumeReport, ClientError> {
    resume_with(cached, fresh, plan, &Script::default(), progress)
}

/// [`resume`] with the conversations made of `script`'s messages.
pub fn resume_with(
    cached: &Client,
    fresh: &Client,
    plan: &ResumePlan,
    script: &Script,
    mut progress: impl FnMut(&TurnRow),
) -> Result<ResumeReport, ClientError> {
    let mut report = ResumeReport::default();
    let servers = (cached, fresh);
    for (name, seed) in [("greedy", None), ("seeded", Some(4242))] {
        let c = Conversation {
            name,
            seed,
            tools: false,
        };
        conversation(servers, &c, plan, script, &mut report.rows, &mut progress)?;
    }
    for (name, seed) in [("tools-greedy", None), ("tools-seeded", Some(77))] {
        let mut rows = Vec::new();
        let c = Conversation {
            name,
            seed,
            tools: true,
        };
        match conversation(servers, &c, plan, script, &mut rows, &mut progress) {
            Ok(()) => report.rows.extend(rows),
            Err(ClientError::Status { status: 400, body }) => report
                .skipped
                .push(format!("{name}: the server refused tool turns ({body})")),
            Err(e) => return Err(e),
        }
    }
    Ok(report)
}
