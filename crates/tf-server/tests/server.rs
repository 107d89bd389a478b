//! The real server on 127.0.0.1 (ephemeral ports) with the real default model, spoken to over
//! HTTP. Skipped with a note when the model is absent, unless TENSORFOLD_REQUIRE_MODEL is set.

use serde_json::{json, Value};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tf_engine::scheduler::SchedulerConfig;
use tf_server::client::{stream_token_sha, token_sha, Client, ClientError};
use tf_server::{ModelText, Server, ServerOptions};

use tf_testkit::default_model;

fn start(parallel: usize, queue: usize, keys: Vec<String>) -> Option<Server> {
    let path = default_model()?;
    let model = tf_models::load(&path, &tf_models::LoadOptions { threads: 2 }).expect("load");
    let text = ModelText::load(&path).expect("tokenizer");
    let opts = ServerOptions {
        addr: "127.0.0.1:0".into(),
        name: "smollm2".into(),
        api_keys: keys,
        max_tokens: None,
        scheduler: SchedulerConfig {
            parallel,
            queue,
            ..Default::default()
        },
        log_requests: false,
        live_display: false,
    };
    Some(Server::start(model, text, opts).expect("start the server"))
}

/// The shared server of this test binary (the model loads once).
fn client() -> Option<Client> {
    static SERVER: OnceLock<Option<Server>> = OnceLock::new();
    let s = SERVER.get_or_init(|| start(4, 64, vec![]));
    s.as_ref()
        .map(|s| Client::new(&format!("http://{}", s.addr()), None))
}

fn chat(content: &str, extra: Value) -> Value {
    let mut b = json!({
        "model": "smollm2",
        "messages": [{"role": "user", "content": content}],
        "temperature": 0,
        "max_tokens": 12,
    });
    if let (Some(b), Some(e)) = (b.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            b.insert(k.clone(), v.clone());
        }
    }
    b
}

fn status_of(r: Result<Value, ClientError>) -> (u16, Value) {
    match r {
        Ok(v) => (200, v),
        Err(ClientError::Status { status, body }) => (status, body),
        Err(e) => panic!("transport failure: {e}"),
    }
}

/// Asserts an OpenAI-shaped error with `status` and, when given, `param` / `code`.
fn assert_error(
    r: Result<Value, ClientError>,
    status: u16,
    param: Option<&str>,
    code: Option<&str>,
) {
    let (got, body) = status_of(r);
    assert_eq!(got, status, "{body}");
    let e = &body["error"];
    assert!(
        e["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    assert!(e["type"].is_string(), "{body}");
    assert!(
        e.get("param").is_some() && e.get("code").is_some(),
        "{body}"
    );
    if let Some(p) = param {
        assert_eq!(e["param"], p, "{body}");
    }
    if let Some(c) = code {
        assert_eq!(e["code"], c, "{body}");
    }
}

fn content_of_stream(chunks: &[Value]) -> String {
    chunks
        .iter()
        .filter_map(|c| {
            c.pointer("/choices/0/delta/content")
                .and_then(Value::as_str)
        })
        .collect()
}

#[test]
fn chat_whole_and_streamed_agree() {
    let Some(c) = client() else { return };
    let whole = c
        .post(
            "/v1/chat/completions",
            &chat("What is the capital of France?", json!({})),
        )
        .expect("chat");
    assert_eq!(whole["object"], "chat.completion");
    let msg = &whole["choices"][0]["message"];
    assert_eq!(msg["role"], "assistant");
    let text = msg["content"].as_str().expect("content");
    assert!(text.contains("Paris"), "{text}");
    let usage = &whole["usage"];
    let n = usage["completion_tokens"].as_u64().expect("usage");
    assert!(n > 0 && n <= 12);
    assert_eq!(
        usage["total_tokens"].as_u64(),
        Some(usage["prompt_tokens"].as_u64().unwrap_or(0) + n)
    );
    assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 0);
    assert_eq!(usage["completion_tokens_details"]["reasoning_tokens"], 0);
    let sha = token_sha(&whole).expect("token_sha");
    assert_eq!(sha.len(), 64);

    let body = chat(
        "What is the capital of France?",
        json!({"stream": true, "stream_options": {"include_usage": true}}),
    );
    let chunks = c
        .post_stream("/v1/chat/completions", &body)
        .expect("stream");
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert!(chunks
        .iter()
        .all(|c| c["object"] == "chat.completion.chunk"));
    assert_eq!(content_of_stream(&chunks), text);
    assert_eq!(stream_token_sha(&chunks).as_deref(), Some(sha.as_str()));
    let finish: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c.pointer("/choices/0/finish_reason"))
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(finish, vec![&whole["choices"][0]["finish_reason"]]);
    let last = chunks.last().expect("usage chunk");
    assert_eq!(last["choices"], json!([]));
    assert_eq!(last["usage"]["completion_tokens"].as_u64(), Some(n));
}

#[test]
fn completions_take_text_or_token_ids() {
    let Some(c) = client() else { return };
    let ids = json!({"prompt": [504, 3575, 282, 4649, 314], "max_tokens": 3, "temperature": 0});
    let a = c.post("/v1/completions", &ids).expect("ids");
    assert_eq!(a["object"], "text_completion");
    let text = a["choices"][0]["text"].as_str().expect("text");
    assert!(text.starts_with(" Paris"), "{text:?}");
    assert_eq!(a["choices"][0]["finish_reason"], "length");
    assert_eq!(a["usage"]["prompt_tokens"], 5);
    let t = c
        .post(
            "/v1/completions",
            &json!({"prompt": "The capital of France is", "max_tokens": 3, "temperature": 0}),
        )
        .expect("text");
    assert_eq!(token_sha(&t), token_sha(&a));
    // Streamed text completion: same tokens.
    let chunks = c.post_stream("/v1/completions", &json!({"prompt": [504, 3575, 282, 4649, 314], "max_tokens": 3, "temperature": 0, "stream": true})).expect("stream");
    let streamed: String = chunks
        .iter()
        .filter_map(|c| c.pointer("/choices/0/text").and_then(Value::as_str))
        .collect();
    assert_eq!(streamed, text);
    assert_eq!(stream_token_sha(&chunks), token_sha(&a));
}

#[test]
fn seeds_reproduce_and_differ() {
    let Some(c) = client() else { return };
    let body = |seed: u64| {
        chat(
            "Tell me a story.",
            json!({"temperature": 1.0, "seed": seed, "max_tokens": 16, "ignore_eos": true}),
        )
    };
    let a = c.post("/v1/chat/completions", &body(7)).expect("a");
    let b = c.post("/v1/chat/completions", &body(7)).expect("b");
    let other = c.post("/v1/chat/completions", &body(8)).expect("other");
    assert_eq!(token_sha(&a), token_sha(&b));
    assert_eq!(
        a["usage"]["completion_tokens"], 16,
        "ignore_eos keeps generating"
    );
    // Planted control: another seed must give another sha, or the comparison is blind.
    assert_ne!(token_sha(&a), token_sha(&other));
}

#[test]
fn stop_strings_cut_the_reply() {
    let Some(c) = client() else { return };
    let body = chat("What is the capital of France?", json!({"stop": ["Paris"]}));
    let v = c.post("/v1/chat/completions", &body).expect("chat");
    let text = v["choices"][0]["message"]["content"]
        .as_str()
        .expect("content");
    assert!(!text.contains("Paris") && !text.is_empty(), "{text:?}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    let mut sb = body.clone();
    sb["stream"] = json!(true);
    let chunks = c.post_stream("/v1/chat/completions", &sb).expect("stream");
    assert_eq!(content_of_stream(&chunks), text);
}

#[test]
fn logprobs_come_with_their_alternatives() {
    let Some(c) = client() else { return };
    let v = c
        .post(
            "/v1/chat/completions",
            &chat(
                "Hi",
                json!({"logprobs": true, "top_logprobs": 3, "max_tokens": 4}),
            ),
        )
        .expect("chat");
    let items = v["choices"][0]["logprobs"]["content"]
        .as_array()
        .expect("logprobs");
    assert_eq!(
        items.len() as u64,
        v["usage"]["completion_tokens"].as_u64().unwrap_or(0)
    );
    for it in items {
        let top = it["top_logprobs"].as_array().expect("top");
        assert_eq!(top.len(), 3);
        // Greedy: the chosen token is the most likely one.
        assert_eq!(it["logprob"], top[0]["logprob"], "{it}");
        assert!(it["logprob"].as_f64().is_some_and(|l| l <= 0.0));
    }
}

#[test]
fn tools_are_rendered_and_answered() {
    let Some(c) = client() else { return };
    let tools = json!([{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
    let v = c
        .post(
            "/v1/chat/completions",
            &chat(
                "Weather in Paris?",
                json!({"tools": tools, "tool_choice": "auto"}),
            ),
        )
        .expect("chat");
    let finish = v["choices"][0]["finish_reason"].as_str().unwrap_or("");
    assert!(["stop", "length", "tool_calls"].contains(&finish), "{v}");
}

#[test]
fn models_health_and_metrics() {
    let Some(c) = client() else { return };
    let m = c.get("/v1/models").expect("models");
    assert_eq!(m["object"], "list");
    assert_eq!(m["data"][0]["id"], "smollm2");
    assert_eq!(c.get("/v1/models/smollm2").expect("model")["id"], "smollm2");
    let h = c.get("/health").expect("health");
    assert_eq!(h["status"], "ok");
    assert_eq!(h["model"], "smollm2");
    assert!(h["streams"]["running"].is_u64() && h["streams"]["waiting"].is_u64());
    assert!(h["memory"]["weight_bytes"]
        .as_u64()
        .is_some_and(|w| w > 1 << 20));
    c.post(
        "/v1/completions",
        &json!({"prompt": "Hello", "max_tokens": 2}),
    )
    .expect("one request");
    let text = c.get_text("/metrics").expect("metrics");
    for name in [
        "tensorfold_requests_total",
        "tensorfold_generated_tokens_total",
        "tensorfold_prompt_tokens_total",
        "tensorfold_queue_depth",
        "tensorfold_decode_tokens_per_second",
        "tensorfold_kv_cache_bytes",
    ] {
        assert!(text.contains(&format!("# TYPE {name} ")), "{name} missing");
    }
    let generated: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("tensorfold_generated_tokens_total "))
        .and_then(|v| v.parse().ok())
        .expect("generated value");
    assert!(generated >= 2.0);
}

#[test]
fn bad_input_gets_openai_shaped_4xx() {
    let Some(c) = client() else { return };
    let p = "/v1/chat/completions";
    assert_error(
        c.post_raw(p, "{\"messages\": [}"),
        400,
        None,
        Some("invalid_json"),
    );
    assert_error(c.post_raw(p, "[1, 2]"), 400, None, None);
    assert_error(
        c.post(p, &chat("hi", json!({"n": 2}))),
        400,
        Some("n"),
        None,
    );
    assert_error(
        c.post(p, &chat("hi", json!({"temperature": "hot"}))),
        400,
        Some("temperature"),
        Some("invalid_type"),
    );
    assert_error(
        c.post(p, &chat("hi", json!({"temperature": 7}))),
        400,
        Some("temperature"),
        None,
    );
    assert_error(
        c.post(p, &chat("hi", json!({"max_tokens": -5}))),
        400,
        Some("max_tokens"),
        None,
    );
    assert_error(
        c.post(p, &chat("hi", json!({"top_p": 0}))),
        400,
        Some("top_p"),
        None,
    );
    assert_error(
        c.post(
            p,
            &chat("hi", json!({"top_logprobs": 50, "logprobs": true})),
        ),
        400,
        Some("top_logprobs"),
        None,
    );
    assert_error(
        c.post(p, &json!({"messages": []})),
        400,
        Some("messages"),
        None,
    );
    assert_error(
        c.post(
            p,
            &json!({"messages": [{"role": "wizard", "content": "x"}]}),
        ),
        400,
        Some("messages[0].role"),
        None,
    );
    assert_error(
        c.post(p, &json!({"messages": [{"role": "user", "content": 5}]})),
        400,
        None,
        Some("invalid_type"),
    );
    assert_error(
        c.post(p, &json!({"messages": "hello"})),
        400,
        Some("messages"),
        Some("invalid_type"),
    );
    let long: Vec<u32> = (0..9000).map(|i| 100 + i % 1000).collect();
    assert_error(
        c.post("/v1/completions", &json!({"prompt": long, "max_tokens": 1})),
        400,
        Some("prompt"),
        Some("context_length_exceeded"),
    );
    assert_error(
        c.post("/v1/completions", &json!({"prompt": [1, 999999]})),
        400,
        Some("prompt"),
        None,
    );
    assert_error(
        c.post("/v1/completions", &json!({"prompt": ["a", "b"]})),
        400,
        Some("prompt"),
        None,
    );
    assert_error(
        c.post("/v1/completions", &json!({"prompt": "x", "echo": true})),
        400,
        Some("echo"),
        None,
    );
    assert_error(
        c.post("/v1/nothing", &json!({})),
        404,
        None,
        Some("unknown_url"),
    );
    // A good request still works after all that.
    c.post(p, &chat("hi", json!({"max_tokens": 1})))
        .expect("still serving");
}

#[test]
fn api_keys_queue_limit_and_disconnects() {
    let Some(server) = start(1, 1, vec!["sekret".into()]) else {
        return;
    };
    let base = format!("http://{}", server.addr());
    let anon = Client::new(&base, None);
    let wrong = Client::new(&base, Some("nope".into()));
    let c = Client::new(&base, Some("sekret".into()));
    assert_error(anon.get("/v1/models"), 401, None, Some("invalid_api_key"));
    assert_error(
        wrong.post("/v1/chat/completions", &chat("hi", json!({}))),
        401,
        None,
        None,
    );
    assert_eq!(anon.get("/health").expect("health is open")["status"], "ok");
    assert_eq!(
        c.get("/v1/models").expect("with key")["data"][0]["id"],
        "smollm2"
    );

    // A holds the only slot, B waits in the one-place queue, C finds no room: 429.
    let long = chat(
        "Count to one thousand.",
        json!({"max_tokens": 4000, "ignore_eos": true, "stream": true}),
    );
    let (ready_tx, ready_rx) = mpsc::channel::<&str>();
    let (release_a, wait_a) = mpsc::channel::<()>();
    let (release_b, wait_b) = mpsc::channel::<()>();
    let holder = |name: &'static str, content_chunks: usize, release: mpsc::Receiver<()>| {
        let (c, body, ready) = (c.clone(), long.clone(), ready_tx.clone());
        std::thread::spawn(move || {
            let mut seen = 0;
            let r = c.post_stream_with("/v1/chat/completions", &body, |chunk| {
                if chunk.pointer("/choices/0/delta/role").is_none() || content_chunks == 0 {
                    seen += 1;
                }
                if seen >= content_chunks.max(1) {
                    let _ = ready.send(name);
                    let _ = release.recv();
                    return false;
                }
                true
            });
            assert_eq!(r.ok(), Some(false), "{name} should be cut by the client");
        })
    };
    let a = holder("a", 2, wait_a);
    assert_eq!(ready_rx.recv_timeout(Duration::from_secs(120)), Ok("a"));
    let b = holder("b", 0, wait_b);
    assert_eq!(ready_rx.recv_timeout(Duration::from_secs(60)), Ok("b"));
    let h = c.get("/health").expect("health");
    assert_eq!(
        (
            h["streams"]["running"].as_u64(),
            h["streams"]["waiting"].as_u64()
        ),
        (Some(1), Some(1)),
        "{h}"
    );
    assert_error(
        c.post("/v1/chat/completions", &chat("hi", json!({}))),
        429,
        None,
        Some("server_busy"),
    );
    // Both clients leave; their streams are cancelled and the slot is free again.
    release_a.send(()).expect("release a");
    release_b.send(()).expect("release b");
    a.join().expect("a");
    b.join().expect("b");
    let t = Instant::now();
    loop {
        let h = c.get("/health").expect("health");
        if h["streams"]["running"] == 0 && h["streams"]["waiting"] == 0 {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "streams not freed: {h}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let m = c.get_text("/metrics").expect("metrics");
    assert!(m.contains("tensorfold_requests_cancelled_total 2"), "{m}");
    c.post(
        "/v1/chat/completions",
        &chat("hi", json!({"max_tokens": 2})),
    )
    .expect("served again");
    server.shutdown().expect("clean shutdown");
}

#[test]
fn unsupported_controls_are_refused_not_ignored() {
    let Some(c) = client() else { return };
    let p = "/v1/chat/completions";
    assert_error(
        c.post(p, &chat("hi", json!({"logit_bias": {"50": 10}}))),
        400,
        Some("logit_bias"),
        Some("unsupported_value"),
    );
    assert_error(
        c.post(
            p,
            &chat("hi", json!({"response_format": {"type": "json_object"}})),
        ),
        400,
        Some("response_format"),
        None,
    );
    // Planted control: the neutral forms are accepted.
    c.post(
        p,
        &chat(
            "hi",
            json!({"max_tokens": 1, "logit_bias": {}, "response_format": {"type": "text"}}),
        ),
    )
    .expect("neutral forms");
}
