//! A client that drops a streamed chat reply mid-generation leaves the next request exact, over
//! HTTP on the Nemotron-H fixture with the prompt cache on: the next turn (built on the part of
//! the reply the client saw) equals the same turn on a server without the cache, and resumes
//! the cancelled stream's state.

mod fixture_chat;

use fixture_chat::*;
use serde_json::{json, Value};
use tf_server::client::token_sha;

fn fixture() -> ChatFixture {
    ChatFixture {
        path: "nemotron_h/plain_moe/f32_hf",
        vocab: 96,
        template: COMPACT_TEMPLATE.into(),
    }
}

/// Waits (30 s at most) until the sum of the metrics `names` reaches `value`.
fn wait_for(server: &tf_server::Server, names: &[&str], value: f64) {
    let t = std::time::Instant::now();
    while names.iter().map(|n| metric(server, n)).sum::<f64>() < value {
        assert!(
            t.elapsed().as_secs() < 30,
            "{names:?} never reached {value}"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[test]
fn a_dropped_stream_leaves_the_next_turn_exact() {
    let f = fixture();
    let cached = start(
        &f,
        &Setup {
            cache_bytes: 64 << 20,
            message_starts: true,
            ..Setup::default()
        },
    );
    let fresh = start(&f, &Setup::default());
    let mut messages = vec![
        json!({"role": "system", "content": "Be brief."}),
        json!({"role": "user", "content": "Tell me more."}),
    ];
    // Stream a long reply and leave after three content chunks. The fixture writes all 150
    // tokens in about 10 ms, so a client held up that long finds its stream finished before the
    // server sees it leave; such an attempt counts as finished, not cancelled, and is repeated.
    let body = json!({"messages": messages, "max_tokens": 150, "stream": true,
                      "ignore_eos": true, "temperature": 0.0});
    let mut seen = String::new();
    for attempt in 1..=10 {
        seen.clear();
        let mut chunks = 0;
        let done = client(&cached)
            .post_stream_with("/v1/chat/completions", &body, |c| {
                if let Some(t) = c
                    .pointer("/choices/0/delta/content")
                    .and_then(Value::as_str)
                {
                    seen.push_str(t);
                    chunks += 1;
                }
                chunks < 3
            })
            .expect("the stream starts");
        assert!(!done, "the client left before the end");
        // The attempt has ended, finished or cancelled.
        let ended = [
            "tensorfold_requests_finished_total",
            "tensorfold_requests_cancelled_total",
        ];
        wait_for(&cached, &ended, attempt as f64);
        if metric(&cached, "tensorfold_requests_cancelled_total") >= 1.0 {
            break;
        }
    }
    assert_eq!(
        metric(&cached, "tensorfold_requests_cancelled_total"),
        1.0,
        "no dropped stream was cancelled mid-reply in 10 attempts"
    );
    wait_for(&cached, &["tensorfold_prompt_cache_entries"], 1.0);
    assert_eq!(metric(&cached, "tensorfold_streams_running"), 0.0);
    // The next turn, greedy and seeded, on both servers.
    messages.push(json!({"role": "assistant", "content": seen}));
    messages.push(json!({"role": "user", "content": "Why?"}));
    for seed in [None, Some(5u64)] {
        let mut body = json!({"messages": messages, "max_tokens": 16,
                              "temperature": if seed.is_some() { 0.8 } else { 0.0 }});
        if let Some(s) = seed {
            body["seed"] = json!(s);
        }
        let a = client(&cached)
            .post("/v1/chat/completions", &body)
            .expect("cached");
        let b = client(&fresh)
            .post("/v1/chat/completions", &body)
            .expect("fresh");
        assert_eq!(token_sha(&a), token_sha(&b), "after the cancel ({seed:?})");
        let reused = a
            .pointer("/usage/prompt_tokens_details/cached_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        assert!(reused > 0, "the cancelled stream's state was resumed: {a}");
    }
    // Planted control: the same comparison catches a different turn.
    let mut other = json!({"messages": messages, "max_tokens": 16, "temperature": 0.8, "seed": 6});
    let a = client(&cached)
        .post("/v1/chat/completions", &other)
        .expect("cached");
    other["seed"] = json!(7);
    let b = client(&fresh)
        .post("/v1/chat/completions", &other)
        .expect("fresh");
    assert_ne!(token_sha(&a), token_sha(&b), "the comparison cannot fail");
}
