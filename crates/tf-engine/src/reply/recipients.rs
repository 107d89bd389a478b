//! Replies written as messages to recipients (the Muse Spark chat format).
//!
//! One assistant turn is a run of messages, each opened by a header naming its recipient:
//!
//! ```text
//! to=self<|message|>reasoning<|eom|>
//! <|start|>assistant to=get_weather<|message|><atem:function_calls>…</atem:function_calls><|eom|>
//! <|start|>assistant to=user<|message|>the answer<|eot|>
//! ```
//!
//! (the prompt ends with `<|start|>assistant `, so the first header arrives without it).
//! `to=self` is reasoning, `to=user` and `to=commentary` are visible content, any other recipient
//! is a tool: its body is either `<atem:function_calls>` with `<atem:invoke name=…>` and
//! `<atem:parameter name=…>` children (mlx-lm's `tool_parsers/muse_spark.py` shape), or a bare
//! JSON arguments value addressed to the tool. `<|eom|>` ends a message and the turn goes on;
//! `<|eot|>` ends the turn, so generation stops on `<|eot|>` and never on `<|eom|>`.
//!
//! Malformed input never errors: a header without `to=`, a tool body that is neither form, or
//! text after `<|eot|>` comes back as content, verbatim.

use super::parser::ReplyDelta;
use serde_json::{json, Map, Value};

/// Ends a message; the turn continues (not a stop).
pub const EOM: &str = "<|eom|>";
/// Ends the turn: the one stop of this format.
pub const EOT: &str = "<|eot|>";
/// Opens a message.
pub const START: &str = "<|start|>";
/// Separates a header from its body.
pub const MESSAGE: &str = "<|message|>";
const CALLS_OPEN: &str = "<atem:function_calls>";
const CALLS_CLOSE: &str = "</atem:function_calls>";
/// Longest header accepted before the text is taken as malformed.
const MAX_HEADER: usize = 256;

/// Strings that stop generation in this format (`<|eot|>` only; `<|eom|>` is not a stop).
pub fn stop_strings() -> &'static [&'static str] {
    &[EOT]
}

/// The stop token ids of a vocabulary: the id of `<|eot|>`, never that of `<|eom|>`.
pub fn stop_token_ids(token_id: impl Fn(&str) -> Option<u32>) -> Vec<u32> {
    stop_strings().iter().filter_map(|s| token_id(s)).collect()
}

/// A tool call in the OpenAI shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// `call_<index>`.
    pub id: String,
    /// The function name.
    pub name: String,
    /// The arguments as a JSON object text.
    pub arguments: String,
}

/// A whole parsed reply.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParsedReply {
    /// Reasoning text (messages to `self`), if any.
    pub reasoning: Option<String>,
    /// Visible text (messages to `user` / `commentary`, and anything malformed), if any.
    pub content: Option<String>,
    /// Tool calls in order.
    pub tool_calls: Vec<ToolCall>,
}

impl ParsedReply {
    /// The OpenAI chat-completions assistant message.
    pub fn to_openai_message(&self) -> Value {
        let mut m = Map::new();
        m.insert("role".into(), "assistant".into());
        m.insert("content".into(), json!(self.content));
        if let Some(r) = &self.reasoning {
            m.insert("reasoning_content".into(), r.clone().into());
        }
        if !self.tool_calls.is_empty() {
            let calls: Vec<Value> = self
                .tool_calls
                .iter()
                .map(|c| {
                    json!({"id": c.id, "type": "function",
                           "function": {"name": c.name, "arguments": c.arguments}})
                })
                .collect();
            m.insert("tool_calls".into(), calls.into());
        }
        Value::Object(m)
    }
}

/// Where the parser is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Reading a header up to `<|message|>`.
    Header,
    /// Streaming a body to `self` (reasoning) or `user` (content).
    Text { reasoning: bool },
    /// Collecting a tool's body until the message ends.
    Tool { name: String },
    /// Text that cannot be a header: content, verbatim, until `<|eot|>`.
    Raw,
    /// After `<|eot|>`: everything is content.
    Done,
}

/// The incremental parser: feed decoded text (whole or token pieces), then `finish`.
#[derive(Debug, Clone)]
pub struct RecipientParser {
    state: State,
    buf: String,
    calls: usize,
}

impl Default for RecipientParser {
    fn default() -> Self {
        RecipientParser::new()
    }
}

/// Length of the longest suffix of `s` that is a proper prefix of one of `markers`.
fn partial_suffix(s: &str, markers: &[&str]) -> usize {
    let mut best = 0;
    for m in markers {
        for len in (1..m.len()).rev() {
            if len <= s.len()
                && s.is_char_boundary(s.len() - len)
                && m.starts_with(&s[s.len() - len..])
            {
                best = best.max(len);
                break;
            }
        }
    }
    best
}

fn push(out: &mut Vec<ReplyDelta>, reasoning: bool, text: &str) {
    if text.is_empty() {
        return;
    }
    out.push(if reasoning {
        ReplyDelta::Reasoning(text.into())
    } else {
        ReplyDelta::Content(text.into())
    });
}

/// The recipient of a header (`assistant to=NAME …`, `to=functions.NAME`), if it names one.
fn recipient(header: &str) -> Option<&str> {
    let rest = header
        .trim()
        .strip_prefix("assistant")
        .unwrap_or(header.trim());
    let to = rest.trim_start().strip_prefix("to=")?;
    let name = to.split_whitespace().next()?;
    let name = name.strip_prefix("functions.").unwrap_or(name);
    (!name.is_empty() && !name.contains('<')).then_some(name)
}

/// The value of an attribute `name="…"` in a tag's text.
fn attr<'a>(tag: &'a str, key: &str) -> Option<&'a str> {
    let at = tag.find(&format!("{key}=\""))? + key.len() + 2;
    let end = tag[at..].find('"')?;
    Some(&tag[at..at + end])
}

/// A parameter value: JSON when it parses, else the trimmed text.
fn param_value(raw: &str) -> Value {
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.trim().to_string()))
}

/// Parses `<atem:function_calls>` invokes into `(name, arguments)`; `None` when malformed.
fn parse_atem(body: &str) -> Option<Vec<(String, String)>> {
    let inner = body.trim().strip_prefix(CALLS_OPEN)?;
    let inner = inner.strip_suffix(CALLS_CLOSE).unwrap_or(inner);
    let mut calls = Vec::new();
    let mut rest = inner;
    while let Some(open) = rest.find("<atem:invoke") {
        let tag_end = open + rest[open..].find('>')?;
        let name = attr(&rest[open..tag_end], "name")?.to_string();
        let close = rest[tag_end..].find("</atem:invoke>")? + tag_end;
        let mut args = Map::new();
        let mut body = &rest[tag_end + 1..close];
        while let Some(p) = body.find("<atem:parameter") {
            let p_end = p + body[p..].find('>')?;
            let key = attr(&body[p..p_end], "name")?.to_string();
            let v_end = p_end + body[p_end..].find("</atem:parameter>")?;
            args.insert(key, param_value(&body[p_end + 1..v_end]));
            body = &body[v_end + "</atem:parameter>".len()..];
        }
        calls.push((name, Value::Object(args).to_string()));
        rest = &rest[close + "</atem:invoke>".len()..];
    }
    (!calls.is_empty() && rest.trim().is_empty()).then_some(calls)
}

impl RecipientParser {
    /// A parser for a reply whose prompt ended with `<|start|>assistant ` (header first).
    pub fn new() -> RecipientParser {
        RecipientParser {
            state: State::Header,
            buf: String::new(),
            calls: 0,
        }
    }

    /// Feeds decoded text; returns what is now known.
    pub fn feed(&mut self, text: &str) -> Vec<ReplyDelta> {
        self.buf.push_str(text);
        let mut out = Vec::new();
        self.step(&mut out, false);
        out
    }

    /// Ends the reply: flushes held text (an unfinished message counts as written).
    pub fn finish(&mut self) -> Vec<ReplyDelta> {
        let mut out = Vec::new();
        self.step(&mut out, true);
        out
    }

    fn tool_deltas(&mut self, name: &str, body: &str, out: &mut Vec<ReplyDelta>) -> bool {
        let calls = if body.trim_start().starts_with(CALLS_OPEN) {
            match parse_atem(body) {
                Some(c) => c,
                None => return false,
            }
        } else {
            match serde_json::from_str::<Value>(body.trim()) {
                Ok(v @ Value::Object(_)) => vec![(name.to_string(), v.to_string())],
                _ => return false,
            }
        };
        for (name, arguments) in calls {
            let index = self.calls;
            self.calls += 1;
            out.push(ReplyDelta::ToolCallStart { index, name });
            out.push(ReplyDelta::ToolCallArgs { index, arguments });
        }
        true
    }

    fn step(&mut self, out: &mut Vec<ReplyDelta>, end: bool) {
        loop {
            match self.state.clone() {
                State::Done => {
                    let text = std::mem::take(&mut self.buf);
                    push(out, false, &text);
                    return;
                }
                State::Raw => {
                    if let Some(at) = self.buf.find(EOT) {
                        let text = self.buf[..at].to_string();
                        push(out, false, &text);
                        self.buf.drain(..at + EOT.len());
                        self.state = State::Done;
                        continue;
                    }
                    let hold = if end {
                        0
                    } else {
                        partial_suffix(&self.buf, &[EOT])
                    };
                    let text: String = self.buf.drain(..self.buf.len() - hold).collect();
                    push(out, false, &text);
                    return;
                }
                State::Header => {
                    let b = self.buf.trim_start_matches(['\n', ' ']);
                    let b = b.strip_prefix(START).unwrap_or(b);
                    if let Some(at) = b.find(MESSAGE) {
                        let header = &b[..at];
                        let after = b[at + MESSAGE.len()..].to_string();
                        self.state = match recipient(header) {
                            Some("self") => State::Text { reasoning: true },
                            Some("user") | Some("commentary") => State::Text { reasoning: false },
                            Some(name) => State::Tool { name: name.into() },
                            None => {
                                // Malformed header: keep the raw text as content.
                                push(out, false, &b[..at + MESSAGE.len()]);
                                State::Text { reasoning: false }
                            }
                        };
                        self.buf = after;
                        continue;
                    }
                    let hopeless = b.len() > MAX_HEADER || b.contains(EOM) || b.contains(EOT);
                    if hopeless || end {
                        // No header will come: the rest of the turn is content, verbatim.
                        self.state = State::Raw;
                        continue;
                    }
                    return;
                }
                State::Text { reasoning } => {
                    let eom = self.buf.find(EOM);
                    let eot = self.buf.find(EOT);
                    let (at, turn_ends) = match (eom, eot) {
                        (Some(a), Some(b)) if b < a => (Some(b), true),
                        (Some(a), _) => (Some(a), false),
                        (None, Some(b)) => (Some(b), true),
                        (None, None) => (None, false),
                    };
                    if let Some(at) = at {
                        let text = self.buf[..at].to_string();
                        push(out, reasoning, &text);
                        let marker = if turn_ends { EOT } else { EOM };
                        self.buf.drain(..at + marker.len());
                        self.state = if turn_ends {
                            State::Done
                        } else {
                            State::Header
                        };
                        continue;
                    }
                    let hold = if end {
                        0
                    } else {
                        partial_suffix(&self.buf, &[EOM, EOT])
                    };
                    let text: String = self.buf.drain(..self.buf.len() - hold).collect();
                    push(out, reasoning, &text);
                    return;
                }
                State::Tool { name } => {
                    let eom = self.buf.find(EOM);
                    let eot = self.buf.find(EOT);
                    let (at, marker) = match (eom, eot) {
                        (Some(a), Some(b)) if b < a => (Some(b), EOT),
                        (Some(a), _) => (Some(a), EOM),
                        (None, Some(b)) => (Some(b), EOT),
                        (None, None) => (None, ""),
                    };
                    let Some(at) = at.or(end.then_some(self.buf.len())) else {
                        return;
                    };
                    let body = self.buf[..at].to_string();
                    if !self.tool_deltas(&name, &body, out) {
                        // Neither form: the message comes back as content, header included.
                        push(out, false, &format!("to={name}{MESSAGE}{body}{marker}"));
                    }
                    self.buf.drain(..(at + marker.len()).min(self.buf.len()));
                    self.state = if marker == EOT {
                        State::Done
                    } else {
                        State::Header
                    };
                    if end && self.buf.is_empty() {
                        return;
                    }
                }
            }
        }
    }
}

/// Parses a whole reply at once (the same result as feeding it in any pieces).
pub fn parse_reply(text: &str) -> ParsedReply {
    let mut p = RecipientParser::new();
    let mut deltas = p.feed(text);
    deltas.extend(p.finish());
    collect(&deltas)
}

/// Folds deltas into a whole reply.
pub fn collect(deltas: &[ReplyDelta]) -> ParsedReply {
    let mut r = ParsedReply::default();
    for d in deltas {
        match d {
            ReplyDelta::Reasoning(t) => r.reasoning.get_or_insert_with(String::new).push_str(t),
            ReplyDelta::Content(t) => r.content.get_or_insert_with(String::new).push_str(t),
            ReplyDelta::ToolCallStart { index, name } => r.tool_calls.push(ToolCall {
                id: format!("call_{index}"),
                name: name.clone(),
                arguments: String::new(),
            }),
            ReplyDelta::ToolCallArgs { index, arguments } => {
                if let Some(c) = r
                    .tool_calls
                    .iter_mut()
                    .find(|c| c.id == format!("call_{index}"))
                {
                    c.arguments.push_str(arguments);
                }
            }
        }
    }
    r
}

/// JSON as Python's `json.dumps` writes it by default (`", "` and `": "` separators), which is
/// what the template's `tojson` prints for non-string parameter values.
fn py_json(v: &Value, out: &mut String) {
    match v {
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                py_json(x, out);
            }
            out.push(']');
        }
        Value::Object(o) => {
            out.push('{');
            for (i, (k, x)) in o.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push_str(": ");
                py_json(x, out);
            }
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// A tool call as the template writes it inside an assistant turn.
fn render_call(name: &str, arguments: &Value, out: &mut String) {
    out.push_str(&format!("{START}assistant to={name}{MESSAGE}{CALLS_OPEN}"));
    out.push_str(&format!("<atem:invoke name=\"{name}\">"));
    if let Value::Object(args) = arguments {
        for (k, v) in args {
            out.push_str(&format!("<atem:parameter name=\"{k}\">"));
            match v {
                Value::String(s) => out.push_str(s),
                other => py_json(other, out),
            }
            out.push_str("</atem:parameter>");
        }
    }
    out.push_str(&format!("</atem:invoke>{CALLS_CLOSE}{EOM}"));
}

/// A tool's result as the template writes it: `<|start|>tool from=NAME<|message|>…<|eom|>`.
pub fn render_tool_result(name: &str, content: &str) -> String {
    format!("{START}tool from={name}{MESSAGE}{content}{EOM}")
}

/// Renders OpenAI-shaped messages (system, user, assistant with `reasoning_content` and
/// `tool_calls`, tool results) as fixtures/muse_spark/chat_template.jinja does; a tool message
/// without `name` takes the name of the call its `tool_call_id` answers. With
/// `add_generation_prompt` the text ends with `<|start|>assistant ` (a header comes next).
pub fn render_conversation(messages: &[Value], add_generation_prompt: bool) -> String {
    let mut out = String::new();
    let mut names: Vec<(String, String)> = Vec::new();
    let text = |m: &Value, k: &str| m.get(k).and_then(Value::as_str).map(str::to_string);
    for m in messages {
        let role = text(m, "role").unwrap_or_default();
        match role.as_str() {
            "assistant" => {
                if let Some(r) = text(m, "reasoning_content") {
                    out.push_str(&format!("{START}assistant to=self{MESSAGE}{r}{EOM}"));
                }
                for c in m
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let f = &c["function"];
                    let name = f["name"].as_str().unwrap_or_default();
                    let args = match &f["arguments"] {
                        Value::String(s) => serde_json::from_str(s).unwrap_or(Value::Null),
                        v => v.clone(),
                    };
                    if let Some(id) = c["id"].as_str() {
                        names.push((id.to_string(), name.to_string()));
                    }
                    render_call(name, &args, &mut out);
                }
                if let Some(c) = text(m, "content") {
                    out.push_str(&format!("{START}assistant to=user{MESSAGE}{c}{EOT}"));
                }
            }
            "tool" => {
                let name = text(m, "name")
                    .or_else(|| {
                        let id = text(m, "tool_call_id")?;
                        names.iter().find(|(i, _)| *i == id).map(|(_, n)| n.clone())
                    })
                    .unwrap_or_default();
                out.push_str(&render_tool_result(
                    &name,
                    &text(m, "content").unwrap_or_default(),
                ));
            }
            _ => {
                let c = text(m, "content").unwrap_or_default();
                out.push_str(&format!("{START}{role}{MESSAGE}{c}{EOT}"));
            }
        }
    }
    if add_generation_prompt {
        out.push_str(&format!("{START}assistant "));
    }
    out
}
