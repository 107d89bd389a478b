//! An incremental reply parser: text in (as it is decoded), typed deltas out.
//!
//! It recognises a leading `<think>…</think>` block (reasoning, when the template has think
//! blocks; the block may already be open when the prompt ends with `<think>`) and
//! `<tool_call>{json}</tool_call>` blocks (when the request has tools). Text that might be the
//! start of a tag is held back until it is known not to be one. A tool call is announced (index
//! and name) as soon as its name is complete, and its arguments follow when the block closes.

use serde_json::Value;

const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";
const CALL_OPEN: &str = "<tool_call>";
const CALL_CLOSE: &str = "</tool_call>";

/// What to look for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplyOptions {
    /// Split a leading `<think>` block into reasoning.
    pub think: bool,
    /// The reply starts inside a think block (the prompt ended with `<think>`).
    pub start_in_think: bool,
    /// Parse `<tool_call>` blocks.
    pub tools: bool,
}

/// A piece of parsed reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyDelta {
    /// Visible text.
    Content(String),
    /// Reasoning text (inside the think block).
    Reasoning(String),
    /// A tool call begins: its index in the reply and the function name.
    ToolCallStart { index: usize, name: String },
    /// Arguments (a JSON text) of the tool call at `index`.
    ToolCallArgs { index: usize, arguments: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Before any visible text: a think block may still open.
    Start,
    Reasoning,
    Content,
    ToolCall,
}

/// The parser; feed it decoded text, then call `finish`.
#[derive(Debug, Clone)]
pub struct ReplyParser {
    opts: ReplyOptions,
    mode: Mode,
    buf: String,
    calls: usize,
    /// Whether the open tool call's start has been sent.
    announced: bool,
    /// Drop whitespace before the next visible text (it follows a closing tag).
    skip_ws: bool,
}

impl ReplyParser {
    /// A parser for one reply.
    pub fn new(opts: ReplyOptions) -> ReplyParser {
        let mode = if opts.think && opts.start_in_think {
            Mode::Reasoning
        } else {
            Mode::Start
        };
        ReplyParser {
            opts,
            mode,
            buf: String::new(),
            calls: 0,
            announced: false,
            skip_ws: false,
        }
    }

    /// Whether the parser is inside a think block.
    pub fn in_reasoning(&self) -> bool {
        self.mode == Mode::Reasoning
    }

    /// Tool calls seen so far.
    pub fn tool_calls(&self) -> usize {
        self.calls
    }

    /// Adds text; returns the deltas it completes.
    pub fn feed(&mut self, text: &str) -> Vec<ReplyDelta> {
        self.buf.push_str(text);
        let mut out = Vec::new();
        loop {
            let before = (self.mode, self.buf.len());
            self.step(&mut out);
            if (self.mode, self.buf.len()) == before {
                return out;
            }
        }
    }

    /// Ends the reply: flushes held text; an unclosed tool call is parsed as it stands.
    pub fn finish(&mut self) -> Vec<ReplyDelta> {
        let mut out = Vec::new();
        let rest = std::mem::take(&mut self.buf);
        match self.mode {
            Mode::Reasoning => push(&mut out, ReplyDelta::Reasoning(rest)),
            Mode::Start | Mode::Content if self.skip_ws => {
                push(&mut out, ReplyDelta::Content(rest.trim_start().to_string()))
            }
            Mode::Start | Mode::Content => push(&mut out, ReplyDelta::Content(rest)),
            Mode::ToolCall => self.close_call(&rest, &mut out),
        }
        self.mode = Mode::Content;
        out
    }

    fn step(&mut self, out: &mut Vec<ReplyDelta>) {
        match self.mode {
            Mode::Start => {
                let trimmed = self.buf.trim_start();
                if self.opts.think && trimmed.starts_with(THINK_OPEN) {
                    let skip = self.buf.len() - trimmed.len() + THINK_OPEN.len();
                    self.buf.drain(..skip);
                    self.mode = Mode::Reasoning;
                } else if trimmed.is_empty() || self.opts.think && THINK_OPEN.starts_with(trimmed) {
                    // Wait: whitespace only, or a think tag still arriving.
                } else {
                    self.mode = Mode::Content;
                }
            }
            Mode::Reasoning => {
                if let Some(text) = self.until(THINK_CLOSE, |_| Mode::Content) {
                    push(out, ReplyDelta::Reasoning(text));
                }
                // Text right after </think> usually starts with a newline or two.
                self.skip_ws = self.mode == Mode::Content;
            }
            Mode::Content => {
                if self.skip_ws {
                    let trimmed = self.buf.trim_start().len();
                    self.buf.drain(..self.buf.len() - trimmed);
                    if self.buf.is_empty() {
                        return;
                    }
                    self.skip_ws = false;
                }
                if !self.opts.tools {
                    push(out, ReplyDelta::Content(std::mem::take(&mut self.buf)));
                    return;
                }
                if let Some(text) = self.until(CALL_OPEN, |_| Mode::ToolCall) {
                    push(out, ReplyDelta::Content(text));
                }
            }
            Mode::ToolCall => {
                if !self.announced {
                    if let Some(name) = name_so_far(&self.buf) {
                        out.push(ReplyDelta::ToolCallStart {
                            index: self.calls,
                            name,
                        });
                        self.announced = true;
                    }
                }
                if let Some(end) = self.buf.find(CALL_CLOSE) {
                    let body: String = self.buf[..end].to_string();
                    self.buf.drain(..end + CALL_CLOSE.len());
                    self.close_call(&body, out);
                    self.mode = Mode::Content;
                    self.skip_ws = true;
                }
            }
        }
    }

    /// In the current mode, returns the text before `tag` (switching mode past it) or the text
    /// that cannot be the start of `tag` (holding the rest).
    fn until(&mut self, tag: &str, next: impl Fn(Mode) -> Mode) -> Option<String> {
        if let Some(at) = self.buf.find(tag) {
            let text = self.buf[..at].to_string();
            self.buf.drain(..at + tag.len());
            self.mode = next(self.mode);
            return Some(text);
        }
        let keep = partial_suffix(&self.buf, tag);
        let split = self.buf.len() - keep;
        let text: String = self.buf.drain(..split).collect();
        Some(text)
    }

    /// Ends a tool call whose body is `body`.
    fn close_call(&mut self, body: &str, out: &mut Vec<ReplyDelta>) {
        let parsed: Option<(String, String)> = serde_json::from_str::<Value>(body.trim())
            .ok()
            .and_then(|v| {
                let name = v.get("name")?.as_str()?.to_string();
                let args = v.get("arguments").or_else(|| v.get("parameters"));
                let args = match args {
                    None => "{}".to_string(),
                    Some(Value::String(s)) => s.clone(),
                    Some(a) => a.to_string(),
                };
                Some((name, args))
            });
        let index = self.calls;
        match (parsed, self.announced) {
            (Some((name, arguments)), announced) => {
                if !announced {
                    out.push(ReplyDelta::ToolCallStart { index, name });
                }
                out.push(ReplyDelta::ToolCallArgs { index, arguments });
                self.calls += 1;
            }
            (None, true) => {
                out.push(ReplyDelta::ToolCallArgs {
                    index,
                    arguments: body.trim().to_string(),
                });
                self.calls += 1;
            }
            (None, false) => {
                push(out, ReplyDelta::Content(format!("{CALL_OPEN}{body}")));
            }
        }
        self.announced = false;
    }
}

/// Pushes a text delta unless it is empty.
fn push(out: &mut Vec<ReplyDelta>, d: ReplyDelta) {
    match &d {
        ReplyDelta::Content(t) | ReplyDelta::Reasoning(t) if t.is_empty() => {}
        _ => out.push(d),
    }
}

/// Length in bytes of the longest suffix of `text` that is a proper prefix of `tag`.
fn partial_suffix(text: &str, tag: &str) -> usize {
    (1..tag.len().min(text.len() + 1))
        .rev()
        .find(|&n| {
            text.is_char_boundary(text.len() - n) && tag.starts_with(&text[text.len() - n..])
        })
        .unwrap_or(0)
}

/// The tool name in a partial JSON object, once its string is complete.
fn name_so_far(body: &str) -> Option<String> {
    let at = body.find("\"name\"")?;
    let rest = body[at + 6..].trim_start().strip_prefix(':')?.trim_start();
    let mut it = serde_json::Deserializer::from_str(rest).into_iter::<String>();
    match it.next() {
        Some(Ok(name)) => Some(name),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `text` one char at a time (the hardest split) and joins same-kind deltas.
    fn run(opts: ReplyOptions, text: &str) -> Vec<ReplyDelta> {
        let mut p = ReplyParser::new(opts);
        let mut out = Vec::new();
        for c in text.chars() {
            out.extend(p.feed(&c.to_string()));
        }
        out.extend(p.finish());
        let mut joined: Vec<ReplyDelta> = Vec::new();
        for d in out {
            match (joined.last_mut(), &d) {
                (Some(ReplyDelta::Content(a)), ReplyDelta::Content(b))
                | (Some(ReplyDelta::Reasoning(a)), ReplyDelta::Reasoning(b)) => a.push_str(b),
                _ => joined.push(d),
            }
        }
        joined
    }

    const TOOLS: ReplyOptions = ReplyOptions {
        think: false,
        start_in_think: false,
        tools: true,
    };

    #[test]
    fn tool_call_is_parsed_and_announced_before_it_closes() {
        let text = "Let me check.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
        let mut p = ReplyParser::new(TOOLS);
        let head = p.feed(&text[..text.find(", \"arg").unwrap_or(0)]);
        assert!(head.contains(&ReplyDelta::ToolCallStart {
            index: 0,
            name: "get_weather".into()
        }));
        assert_eq!(
            run(TOOLS, text),
            vec![
                ReplyDelta::Content("Let me check.".into()),
                ReplyDelta::ToolCallStart {
                    index: 0,
                    name: "get_weather".into()
                },
                ReplyDelta::ToolCallArgs {
                    index: 0,
                    arguments: "{\"city\":\"Paris\"}".into()
                },
            ]
        );
    }

    #[test]
    fn two_calls_get_two_indices_and_unclosed_call_is_parsed_at_the_end() {
        let text = "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n<tool_call>{\"name\": \"b\", \"arguments\": \"{\\\"x\\\":1}\"}";
        let d = run(TOOLS, text);
        assert_eq!(
            d,
            vec![
                ReplyDelta::ToolCallStart {
                    index: 0,
                    name: "a".into()
                },
                ReplyDelta::ToolCallArgs {
                    index: 0,
                    arguments: "{}".into()
                },
                ReplyDelta::ToolCallStart {
                    index: 1,
                    name: "b".into()
                },
                ReplyDelta::ToolCallArgs {
                    index: 1,
                    arguments: "{\"x\":1}".into()
                },
            ]
        );
    }

    #[test]
    fn broken_call_without_a_name_stays_content() {
        let d = run(TOOLS, "<tool_call>not json</tool_call>");
        assert_eq!(d, vec![ReplyDelta::Content("<tool_call>not json".into())]);
    }

    #[test]
    fn without_tools_tags_are_plain_content() {
        let text = "<tool_call>{\"name\": \"a\"}</tool_call>";
        assert_eq!(
            run(ReplyOptions::default(), text),
            vec![ReplyDelta::Content(text.into())]
        );
    }

    #[test]
    fn think_block_becomes_reasoning() {
        let opts = ReplyOptions {
            think: true,
            ..Default::default()
        };
        assert_eq!(
            run(opts, "<think>\nhmm, 2+2</think>\n\nIt is 4."),
            vec![
                ReplyDelta::Reasoning("\nhmm, 2+2".into()),
                ReplyDelta::Content("It is 4.".into())
            ]
        );
        // Planted control: a reply without a think block is all content.
        assert_eq!(
            run(opts, "<thin air"),
            vec![ReplyDelta::Content("<thin air".into())]
        );
        let open = ReplyOptions {
            start_in_think: true,
            ..opts
        };
        assert_eq!(
            run(open, "a</think>b"),
            vec![
                ReplyDelta::Reasoning("a".into()),
                ReplyDelta::Content("b".into())
            ]
        );
    }

    #[test]
    fn partial_tag_suffix_is_held() {
        assert_eq!(partial_suffix("abc<tool_", CALL_OPEN), 6);
        assert_eq!(partial_suffix("abc", CALL_OPEN), 0);
        assert_eq!(partial_suffix("é<", CALL_OPEN), 1);
    }
}
