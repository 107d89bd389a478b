//! The reply driver on crafted token streams (the real model's tokenizer; no forward pass):
//! tool calls parsed and shaped as OpenAI deltas, reasoning split, stop strings, token_sha.

use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tf_engine::generate::FinishReason;
use tf_engine::reply::parser::{ReplyDelta, ReplyOptions};
use tf_engine::scheduler::{Finished, StreamEvent, TokenEvent};
use tf_server::reply::{drive, token_sha, Out, ReplySetup};
use tf_server::shape::{Collected, Kind, Shape};
use tf_server::ModelText;

use tf_testkit::default_model;

/// Feeds `reply`'s token ids (then Finished with `reason`) through the driver.
fn run(
    text: &Arc<ModelText>,
    reply: &str,
    opts: ReplyOptions,
    stop: &[&str],
    reason: FinishReason,
) -> (Vec<u32>, Vec<Out>) {
    let ids = text.tokenizer.encode(reply, false).expect("encode");
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    for &id in &ids {
        tx.send(StreamEvent::Token(TokenEvent { id, logprob: None }))
            .expect("send");
    }
    tx.send(StreamEvent::Finished(Finished {
        reason,
        prompt_tokens: 3,
        cached_tokens: 0,
        generated_tokens: ids.len(),
        queued: Duration::ZERO,
        prefill: Duration::ZERO,
        decode: Duration::ZERO,
    }))
    .expect("send");
    let setup = ReplySetup {
        stop: stop.iter().map(|s| s.to_string()).collect(),
        parser: opts,
        prompt_tokens: 3,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let mut outs = Vec::new();
    rt.block_on(drive(
        text.clone(),
        rx,
        setup,
        std::future::pending(),
        |o| {
            outs.push(o);
            true
        },
    ));
    (ids, outs)
}

fn shape() -> Shape {
    Shape {
        kind: Kind::Chat,
        id: "chatcmpl-test-1".into(),
        created: 0,
        model: "m".into(),
        logprobs: false,
        seed: 1,
    }
}

#[test]
fn tool_calls_from_tokens_become_openai_deltas() {
    let Some(path) = default_model() else { return };
    let text = Arc::new(ModelText::load(&path).expect("tokenizer"));
    let reply = "Checking.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    let opts = ReplyOptions {
        tools: true,
        ..Default::default()
    };
    let (ids, outs) = run(&text, reply, opts, &[], FinishReason::Stop);
    let shape = shape();
    let mut chunks: Vec<Value> = Vec::new();
    let mut collected = Collected::default();
    let mut summary = None;
    let mut offset = 0;
    for o in outs {
        match o {
            Out::Piece(d, l) => {
                chunks.extend(shape.piece_chunk(&d, &l, &mut offset));
                collected.add(d, l);
            }
            Out::Done(s) => summary = Some(s),
            Out::Failed(e) => panic!("{e}"),
        }
    }
    let s = summary.expect("done");
    assert_eq!(s.finish, "tool_calls");
    assert_eq!(s.token_sha, token_sha(&ids));
    assert_eq!(s.completion_tokens, ids.len());
    // The call is announced (id, type, name) in an earlier chunk than its arguments.
    let calls: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c.pointer("/choices/0/delta/tool_calls/0"))
        .collect();
    assert_eq!(calls.len(), 2, "{chunks:?}");
    assert_eq!(calls[0]["function"]["name"], "get_weather");
    assert_eq!(calls[0]["type"], "function");
    assert!(calls[0]["id"]
        .as_str()
        .is_some_and(|i| i.starts_with("call_")));
    assert_eq!(calls[1]["function"]["arguments"], "{\"city\":\"Paris\"}");
    assert_eq!(calls[1]["index"], 0);
    let whole = shape.whole(&collected, &s);
    let msg = &whole["choices"][0]["message"];
    assert_eq!(msg["content"], "Checking.");
    assert_eq!(msg["tool_calls"][0]["function"]["name"], "get_weather");
    assert_eq!(whole["choices"][0]["finish_reason"], "tool_calls");
    // Planted control: the same tokens without tools enabled stay plain content.
    let (_, outs) = run(
        &text,
        reply,
        ReplyOptions::default(),
        &[],
        FinishReason::Stop,
    );
    let mut plain = Collected::default();
    for o in outs {
        if let Out::Piece(d, l) = o {
            plain.add(d, l);
        }
    }
    assert!(plain.calls.is_empty());
    assert_eq!(plain.content, reply);
}

#[test]
fn reasoning_and_stop_strings() {
    let Some(path) = default_model() else { return };
    let text = Arc::new(ModelText::load(&path).expect("tokenizer"));
    let opts = ReplyOptions {
        think: true,
        ..Default::default()
    };
    let (_, outs) = run(
        &text,
        "<think>two and two</think>\n\nFour. The end.",
        opts,
        &[" The end"],
        FinishReason::Length,
    );
    let mut got = Collected::default();
    let mut finish = "";
    let mut reasoning_tokens = 0;
    for o in outs {
        match o {
            Out::Piece(d, l) => {
                assert!(d
                    .iter()
                    .all(|x| !matches!(x, ReplyDelta::ToolCallStart { .. })));
                got.add(d, l);
            }
            Out::Done(s) => {
                finish = s.finish;
                reasoning_tokens = s.reasoning_tokens;
            }
            Out::Failed(e) => panic!("{e}"),
        }
    }
    assert_eq!(got.reasoning, "two and two");
    assert_eq!(got.content, "Four.");
    assert_eq!(
        finish, "stop",
        "a stop string ends the reply with stop, not length"
    );
    assert!(reasoning_tokens > 0);
}
