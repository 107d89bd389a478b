//! OpenAI response shapes: chat and text completions, whole or as stream chunks.

use crate::reply::{LogprobItem, Summary};
use serde_json::{json, Value};
use tf_engine::reply::parser::ReplyDelta;

/// Which API a reply answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `/v1/chat/completions`.
    Chat,
    /// `/v1/completions`.
    Text,
}

/// Everything a reply's JSON carries besides its pieces.
#[derive(Debug, Clone)]
pub struct Shape {
    pub kind: Kind,
    pub id: String,
    pub created: u64,
    pub model: String,
    pub logprobs: bool,
    pub seed: u64,
}

/// A whole (non-streamed) reply, accumulated from pieces.
#[derive(Debug, Clone, Default)]
pub struct Collected {
    pub content: String,
    pub reasoning: String,
    pub calls: Vec<(String, String)>,
    pub logprobs: Vec<LogprobItem>,
}

impl Collected {
    /// Adds a piece.
    pub fn add(&mut self, deltas: Vec<ReplyDelta>, lps: Vec<LogprobItem>) {
        for d in deltas {
            match d {
                ReplyDelta::Content(t) => self.content.push_str(&t),
                ReplyDelta::Reasoning(t) => self.reasoning.push_str(&t),
                ReplyDelta::ToolCallStart { name, .. } => self.calls.push((name, String::new())),
                ReplyDelta::ToolCallArgs { arguments, .. } => {
                    if let Some(c) = self.calls.last_mut() {
                        c.1.push_str(&arguments);
                    }
                }
            }
        }
        self.logprobs.extend(lps);
    }
}

fn top_json(top: &[(String, Vec<u8>, f32)]) -> Value {
    top.iter()
        .map(|(t, b, l)| json!({"token": t, "logprob": l, "bytes": b}))
        .collect()
}

impl Shape {
    fn object(&self, chunk: bool) -> &'static str {
        match (self.kind, chunk) {
            (Kind::Chat, false) => "chat.completion",
            (Kind::Chat, true) => "chat.completion.chunk",
            (Kind::Text, _) => "text_completion",
        }
    }

    fn call_id(&self, index: usize) -> String {
        format!("call_{}_{index}", self.id.rsplit('-').next().unwrap_or("0"))
    }

    /// Logprobs in the API's shape; `offset` is the text offset of the first token (legacy).
    pub fn logprobs_json(&self, items: &[LogprobItem], offset: &mut usize) -> Value {
        if !self.logprobs {
            return Value::Null;
        }
        match self.kind {
            Kind::Chat => json!({"content": items.iter().map(|i| json!({
                "token": i.token, "logprob": i.logprob, "bytes": i.bytes, "top_logprobs": top_json(&i.top),
            })).collect::<Vec<_>>()}),
            Kind::Text => {
                let mut offsets = Vec::new();
                for i in items {
                    offsets.push(*offset);
                    *offset += i.token.len();
                }
                json!({
                    "tokens": items.iter().map(|i| i.token.clone()).collect::<Vec<_>>(),
                    "token_logprobs": items.iter().map(|i| i.logprob).collect::<Vec<_>>(),
                    "top_logprobs": items.iter().map(|i| {
                        i.top.iter().map(|(t, _, l)| (t.clone(), json!(l))).collect::<serde_json::Map<_, _>>()
                    }).collect::<Vec<_>>(),
                    "text_offset": offsets,
                })
            }
        }
    }

    /// Usage in the API's shape.
    pub fn usage(s: &Summary) -> Value {
        json!({
            "prompt_tokens": s.prompt_tokens,
            "completion_tokens": s.completion_tokens,
            "total_tokens": s.prompt_tokens + s.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": s.cached_tokens},
            "completion_tokens_details": {"reasoning_tokens": s.reasoning_tokens},
        })
    }

    /// The `tensorfold` extension object.
    pub fn extension(&self, s: &Summary) -> Value {
        json!({
            "token_sha": s.token_sha,
            "seed": self.seed,
            "prefill_ms": s.prefill_ms,
            "decode_ms": s.decode_ms,
        })
    }

    fn envelope(&self, chunk: bool, choices: Value) -> Value {
        json!({
            "id": self.id,
            "object": self.object(chunk),
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "tensorfold",
            "choices": choices,
        })
    }

    /// The first chunk of a chat stream (the assistant role).
    pub fn first_chunk(&self) -> Option<Value> {
        (self.kind == Kind::Chat).then(|| {
            self.envelope(
                true,
                json!([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null}]),
            )
        })
    }

    /// A stream chunk for one piece; None when it carries nothing.
    pub fn piece_chunk(
        &self,
        deltas: &[ReplyDelta],
        lps: &[LogprobItem],
        offset: &mut usize,
    ) -> Option<Value> {
        let mut content = String::new();
        let mut reasoning = String::new();
        let mut calls = Vec::new();
        for d in deltas {
            match d {
                ReplyDelta::Content(t) => content.push_str(t),
                ReplyDelta::Reasoning(t) => reasoning.push_str(t),
                ReplyDelta::ToolCallStart { index, name } => calls.push(json!({
                    "index": index, "id": self.call_id(*index), "type": "function",
                    "function": {"name": name, "arguments": ""},
                })),
                ReplyDelta::ToolCallArgs { index, arguments } => calls.push(json!({
                    "index": index, "function": {"arguments": arguments},
                })),
            }
        }
        if content.is_empty() && reasoning.is_empty() && calls.is_empty() && lps.is_empty() {
            return None;
        }
        let logprobs = self.logprobs_json(lps, offset);
        let choice = match self.kind {
            Kind::Chat => {
                let mut delta = serde_json::Map::new();
                if !content.is_empty() {
                    delta.insert("content".into(), content.into());
                }
                if !reasoning.is_empty() {
                    delta.insert("reasoning_content".into(), reasoning.into());
                }
                if !calls.is_empty() {
                    delta.insert("tool_calls".into(), calls.into());
                }
                json!({"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": null})
            }
            Kind::Text => {
                json!({"index": 0, "text": content, "logprobs": logprobs, "finish_reason": null})
            }
        };
        Some(self.envelope(true, json!([choice])))
    }

    /// The last chunk: the finish reason and the `tensorfold` extension (and the usage when
    /// `usage` is set, as a separate chunk with no choices, per `stream_options`).
    pub fn final_chunks(&self, s: &Summary, usage: bool) -> Vec<Value> {
        let choice = match self.kind {
            Kind::Chat => {
                json!({"index": 0, "delta": {}, "logprobs": null, "finish_reason": s.finish})
            }
            Kind::Text => {
                json!({"index": 0, "text": "", "logprobs": null, "finish_reason": s.finish})
            }
        };
        let mut last = self.envelope(true, json!([choice]));
        last["tensorfold"] = self.extension(s);
        let mut out = vec![last];
        if usage {
            let mut u = self.envelope(true, json!([]));
            u["usage"] = Shape::usage(s);
            u["tensorfold"] = self.extension(s);
            out.push(u);
        }
        out
    }

    /// A whole reply.
    pub fn whole(&self, c: &Collected, s: &Summary) -> Value {
        let mut offset = 0;
        let logprobs = self.logprobs_json(&c.logprobs, &mut offset);
        let choice = match self.kind {
            Kind::Chat => {
                let mut message = json!({"role": "assistant", "content": c.content});
                if !c.calls.is_empty() {
                    if c.content.is_empty() {
                        message["content"] = Value::Null;
                    }
                    message["tool_calls"] = c
                        .calls
                        .iter()
                        .enumerate()
                        .map(|(i, (name, args))| {
                            json!({
                                "id": self.call_id(i), "type": "function",
                                "function": {"name": name, "arguments": args},
                            })
                        })
                        .collect();
                }
                if !c.reasoning.is_empty() {
                    message["reasoning_content"] = c.reasoning.clone().into();
                }
                json!({"index": 0, "message": message, "logprobs": logprobs, "finish_reason": s.finish})
            }
            Kind::Text => {
                json!({"index": 0, "text": c.content, "logprobs": logprobs, "finish_reason": s.finish})
            }
        };
        let mut v = self.envelope(false, json!([choice]));
        v["usage"] = Shape::usage(s);
        v["tensorfold"] = self.extension(s);
        v
    }
}
