//! Turning a stream's scheduler events into reply pieces: decoded text, stop strings, reasoning
//! and tool-call parsing, logprobs, and the summary (usage, finish reason, token_sha).

use crate::text::ModelText;
use sha2::{Digest, Sha256};
use std::future::Future;
use std::sync::Arc;
use tf_engine::generate::FinishReason;
use tf_engine::reply::parser::{ReplyDelta, ReplyOptions, ReplyParser};
use tf_engine::scheduler::{EventSink, StreamEvent, TokenLogprob};
use tf_engine::stop::StopStrings;
use tf_tokenize::StreamDecoder;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

/// Sends scheduler events into a tokio channel; closed once the request's task is gone.
pub struct ChannelSink(pub UnboundedSender<StreamEvent>);

impl EventSink for ChannelSink {
    fn send(&mut self, event: StreamEvent) -> bool {
        self.0.send(event).is_ok()
    }
    fn is_closed(&self) -> bool {
        self.0.is_closed()
    }
}

/// One token's logprob entry, with readable token text.
#[derive(Debug, Clone)]
pub struct LogprobItem {
    pub token: String,
    pub bytes: Vec<u8>,
    pub logprob: f32,
    pub top: Vec<(String, Vec<u8>, f32)>,
}

/// How a reply ended.
#[derive(Debug, Clone)]
pub struct Summary {
    /// OpenAI finish reason: stop, length or tool_calls.
    pub finish: &'static str,
    pub prompt_tokens: usize,
    /// Prompt tokens resumed from the prompt cache (`usage.prompt_tokens_details.cached_tokens`).
    pub cached_tokens: usize,
    pub completion_tokens: usize,
    pub reasoning_tokens: usize,
    /// sha256 (hex) of the generated ids as little-endian u32 bytes.
    pub token_sha: String,
    /// The generated ids.
    pub ids: Vec<u32>,
    pub prefill_ms: f64,
    pub decode_ms: f64,
}

/// What the driver hands on.
#[derive(Debug, Clone)]
pub enum Out {
    /// Parsed text and tool-call pieces, with the logprobs of the tokens behind them.
    Piece(Vec<ReplyDelta>, Vec<LogprobItem>),
    /// The reply is over.
    Done(Summary),
    /// The engine failed.
    Failed(String),
}

/// How to read one reply.
#[derive(Debug, Clone)]
pub struct ReplySetup {
    pub stop: Vec<String>,
    pub parser: ReplyOptions,
    pub prompt_tokens: usize,
}

/// sha256 hex of ids as little-endian u32 bytes.
pub fn token_sha(ids: &[u32]) -> String {
    let mut h = Sha256::new();
    for id in ids {
        h.update(id.to_le_bytes());
    }
    hex::encode(h.finalize())
}

fn logprob_item(text: &ModelText, id: u32, lp: &TokenLogprob) -> LogprobItem {
    let piece = |id: u32| {
        (
            text.tokenizer.token_to_piece(id).unwrap_or_default(),
            text.tokenizer.token_bytes(id).unwrap_or_default().to_vec(),
        )
    };
    let (token, bytes) = piece(id);
    LogprobItem {
        token,
        bytes,
        logprob: lp.logprob,
        top: lp
            .top
            .iter()
            .map(|&(t, l)| {
                let (s, b) = piece(t);
                (s, b, l)
            })
            .collect(),
    }
}

/// Reads events until the reply ends, handing pieces to `emit` (which returns false when its
/// reader is gone). Returning drops `rx`, which cancels the stream at the next round; so does
/// `cancelled` resolving (the client left while nothing was emitted).
pub async fn drive(
    text: Arc<ModelText>,
    mut rx: UnboundedReceiver<StreamEvent>,
    setup: ReplySetup,
    cancelled: impl Future<Output = ()>,
    mut emit: impl FnMut(Out) -> bool,
) {
    let mut decoder = StreamDecoder::continuation(&text.tokenizer, true);
    let mut stops = StopStrings::new(setup.stop);
    let mut parser = ReplyParser::new(setup.parser);
    let mut ids: Vec<u32> = Vec::new();
    let mut reasoning_tokens = 0usize;
    let mut lps: Vec<LogprobItem> = Vec::new();
    let summary = |ids: Vec<u32>, finish, reasoning_tokens, prefill_ms, decode_ms| Summary {
        finish,
        prompt_tokens: setup.prompt_tokens,
        cached_tokens: 0,
        completion_tokens: ids.len(),
        reasoning_tokens,
        token_sha: token_sha(&ids),
        ids,
        prefill_ms,
        decode_ms,
    };
    tokio::pin!(cancelled);
    loop {
        let ev = tokio::select! {
            ev = rx.recv() => ev,
            _ = &mut cancelled => return,
        };
        match ev {
            Some(StreamEvent::Token(t)) => {
                ids.push(t.id);
                if let Some(lp) = &t.logprob {
                    lps.push(logprob_item(&text, t.id, lp));
                }
                let delta = decoder.push(t.id).unwrap_or_default();
                let fed = stops.feed(&delta);
                let mut deltas = parser.feed(&fed.emit);
                if parser.in_reasoning()
                    || deltas.iter().any(|d| matches!(d, ReplyDelta::Reasoning(_)))
                {
                    reasoning_tokens += 1;
                }
                if fed.stopped {
                    deltas.extend(parser.finish());
                    let finish = if parser.tool_calls() > 0 {
                        "tool_calls"
                    } else {
                        "stop"
                    };
                    if emit(Out::Piece(deltas, std::mem::take(&mut lps))) {
                        emit(Out::Done(summary(ids, finish, reasoning_tokens, 0.0, 0.0)));
                    }
                    return;
                }
                if !deltas.is_empty() && !emit(Out::Piece(deltas, std::mem::take(&mut lps))) {
                    return;
                }
            }
            Some(StreamEvent::Finished(f)) => {
                let tail = decoder.finish().unwrap_or_default();
                let fed = stops.feed(&tail);
                let mut rest = fed.emit;
                if !fed.stopped {
                    rest.push_str(&stops.finish());
                }
                let mut deltas = parser.feed(&rest);
                deltas.extend(parser.finish());
                let finish = match (f.reason, parser.tool_calls()) {
                    (FinishReason::Length, _) if !fed.stopped => "length",
                    (_, 0) => "stop",
                    _ => "tool_calls",
                };
                if (!deltas.is_empty() || !lps.is_empty())
                    && !emit(Out::Piece(deltas, std::mem::take(&mut lps)))
                {
                    return;
                }
                let mut s = summary(
                    ids,
                    finish,
                    reasoning_tokens,
                    f.prefill.as_secs_f64() * 1e3,
                    f.decode.as_secs_f64() * 1e3,
                );
                s.cached_tokens = f.cached_tokens;
                emit(Out::Done(s));
                return;
            }
            Some(StreamEvent::Failed(e)) => {
                emit(Out::Failed(e));
                return;
            }
            None => {
                emit(Out::Failed(
                    "the scheduler stopped before the reply ended".into(),
                ));
                return;
            }
        }
    }
}
