//! A server over a committed tiny fixture checkpoint (no download needed), with a byte-level
//! tokenizer, and the concurrent == solo check the family tests share.

use serde_json::{json, Value};
use std::path::Path;
use tf_engine::scheduler::SchedulerConfig;
use tf_server::client::{token_sha, Client};
use tf_server::{ModelText, Server, ServerOptions};
use tf_tokenize::Tokenizer;

/// GPT-2's byte-to-symbol map: printable bytes map to themselves, the rest to 256 + n.
fn byte_symbol(b: u8) -> char {
    let printable = |b: u8| (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
    if printable(b) {
        return char::from(b);
    }
    let n = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + n).expect("valid")
}

/// A byte-level BPE tokenizer.json of exactly 256 tokens (one per byte, no merges), written to
/// a temporary directory; fixture token ids stay below the model's vocabulary.
fn byte_tokenizer(name: &str) -> Tokenizer {
    let vocab: serde_json::Map<String, Value> = (0..=255u8)
        .map(|b| (byte_symbol(b).to_string(), json!(b)))
        .collect();
    let tj = json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                  "ignore_merges": false, "vocab": vocab, "merges": []}
    });
    let dir = std::env::temp_dir().join(format!("tf-fixture-http-{}-{}", std::process::id(), name));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tokenizer.json");
    std::fs::write(&path, tj.to_string()).unwrap();
    let t = Tokenizer::from_file(&path).expect("tokenizer");
    let _ = std::fs::remove_dir_all(&dir);
    t
}

/// Starts a server on 127.0.0.1 over a committed fixture checkpoint (path under fixtures/).
pub fn start(fixture: &str) -> Server {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures")
        .join(fixture);
    let model = tf_models::load(&path, &tf_models::LoadOptions { threads: 2 }).expect("load");
    let text = ModelText::new(byte_tokenizer(fixture), None).expect("text");
    let opts = ServerOptions {
        addr: "127.0.0.1:0".into(),
        name: fixture.into(),
        api_keys: vec![],
        max_tokens: None,
        scheduler: SchedulerConfig {
            parallel: 4,
            queue: 64,
            ..Default::default()
        },
        log_requests: false,
        live_display: false,
    };
    Server::start(model, text, opts).expect("start")
}

fn request(prompt: &[u32], seed: u64) -> Value {
    // Sampled (temperature 1, keyed by seed) so that any batching effect would show.
    json!({"prompt": prompt, "max_tokens": 24, "temperature": 1.0, "seed": seed})
}

/// Six sampled completions sent at once equal each sent alone (token_sha), on each fixture whose
/// vocabulary has `vocab` tokens; another seed changes some completion (planted control).
pub fn concurrent_equals_solo(fixtures: &[&str], vocab: u32) {
    for &fixture in fixtures {
        let server = start(fixture);
        let base = format!("http://{}", server.addr());
        let prompts: Vec<(Vec<u32>, u64)> = (0..6u32)
            .map(|i| {
                (
                    (0..3 + 5 * i)
                        .map(|j| (j * 37 + 11 * i + 5) % (vocab - 4) + 4)
                        .collect(),
                    i as u64,
                )
            })
            .collect();
        let solo: Vec<String> = prompts
            .iter()
            .map(|(p, s)| {
                let r = Client::new(&base, None)
                    .post("/v1/completions", &request(p, *s))
                    .expect("solo");
                let n = r
                    .pointer("/usage/completion_tokens")
                    .and_then(Value::as_u64);
                assert!(n.is_some_and(|n| n > 1), "{r}");
                token_sha(&r).expect("token_sha")
            })
            .collect();
        let together: Vec<String> = std::thread::scope(|sc| {
            let hs: Vec<_> = prompts
                .iter()
                .map(|(p, s)| {
                    let base = base.clone();
                    sc.spawn(move || {
                        let r = Client::new(&base, None)
                            .post("/v1/completions", &request(p, *s))
                            .expect("together");
                        token_sha(&r).expect("token_sha")
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(together, solo, "{fixture}");
        // Planted control: another seed gives another completion for some prompt.
        let other: Vec<String> = prompts
            .iter()
            .map(|(p, s)| {
                let r = Client::new(&base, None)
                    .post("/v1/completions", &request(p, s + 100))
                    .unwrap();
                token_sha(&r).unwrap()
            })
            .collect();
        assert_ne!(other, solo, "{fixture}: the seed changes nothing");
        server.shutdown().expect("shutdown");
    }
}
