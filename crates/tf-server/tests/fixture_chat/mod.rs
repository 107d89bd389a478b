//! Chat servers over the committed tiny fixture checkpoints, for the receipts over HTTP: a
//! byte-level tokenizer sized to the fixture's vocabulary, a chat template (the message marker
//! found from it as `tensorfold serve` would), and two servers of one fixture compared by the
//! receipts.
#![allow(dead_code)]

use serde_json::{json, Value};
use std::path::Path;
use tf_engine::scheduler::SchedulerConfig;
use tf_server::client::Client;
use tf_server::{ModelText, Server, ServerOptions};
use tf_tokenize::{ChatTemplate, Tokenizer};

/// A compact template for fixtures with a small context: `@role:` opens each message and a
/// newline closes it; tool definitions and calls are named, not spelled out.
pub const COMPACT_TEMPLATE: &str = "{%- if tools %}@t:{% for t in tools %}{{ t.function.name }} \
{% endfor %}\n{% endif -%}\
{%- for m in messages %}@{{ m.role }}:{% if m.tool_calls %}{% for c in m.tool_calls %}>\
{{ c.function.name }}{% endfor %}{% endif %}{% if m.content %}{{ m.content }}{% endif %}\
{{ '\\n' }}{% endfor -%}\
{%- if add_generation_prompt %}@assistant:{% endif -%}";

/// The Muse Spark fixture's own chat template.
pub fn muse_template() -> String {
    std::fs::read_to_string(fixtures().join("muse_spark/chat/chat_template.jinja"))
        .expect("the Muse Spark template")
}

fn fixtures() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

/// GPT-2's byte-to-symbol map: printable bytes map to themselves, the rest to 256 + n.
fn byte_symbol(b: u8) -> char {
    let printable = |b: u8| (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
    if printable(b) {
        return char::from(b);
    }
    let n = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + n).expect("valid")
}

/// A byte-level BPE tokenizer (no merges) over `bytes`, token id = index: every byte for a
/// 256-token vocabulary, or newline and printable ASCII (96 tokens) for a smaller one.
pub fn byte_tokenizer(vocab: usize) -> Tokenizer {
    let bytes: Vec<u8> = if vocab >= 256 {
        (0..=255).collect()
    } else {
        std::iter::once(b'\n')
            .chain(0x20..0x7F)
            .take(vocab)
            .collect()
    };
    let map: serde_json::Map<String, Value> = bytes
        .iter()
        .enumerate()
        .map(|(i, &b)| (byte_symbol(b).to_string(), json!(i)))
        .collect();
    let tj = json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                  "ignore_merges": false, "vocab": map, "merges": []}
    });
    let dir = std::env::temp_dir().join(format!(
        "tf-fixture-chat-{}-{vocab}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("tokenizer.json");
    std::fs::write(&path, tj.to_string()).expect("write tokenizer.json");
    let t = Tokenizer::from_file(&path).expect("tokenizer");
    let _ = std::fs::remove_dir_all(&dir);
    t
}

/// A fixture served for chat.
#[derive(Debug, Clone)]
pub struct ChatFixture {
    /// The checkpoint, under fixtures/.
    pub path: &'static str,
    /// Its vocabulary size.
    pub vocab: usize,
    /// The chat template source.
    pub template: String,
}

/// How one server of a fixture runs.
#[derive(Debug, Clone, Default)]
pub struct Setup {
    /// Prompt cache bytes (0: the fresh reference).
    pub cache_bytes: u64,
    /// Restart the chunk grid at message starts and add boundaries at message end tokens (both
    /// found from the template).
    pub message_starts: bool,
    /// Tokens of the stream's tail a context copy must match (0: the default).
    pub draft_match: usize,
    /// Planted controls.
    pub planted_stale_cache: bool,
    pub planted_unverified_drafts: bool,
}

/// The message marker `fixture`'s template gives with its tokenizer.
pub fn marker(fixture: &ChatFixture) -> Option<Vec<u32>> {
    let template = ChatTemplate::new(&fixture.template).expect("template");
    tf_tokenize::message_marker(&template, &byte_tokenizer(fixture.vocab))
}

/// The message end token `fixture`'s template gives with its tokenizer.
pub fn end_token(fixture: &ChatFixture) -> Option<u32> {
    let template = ChatTemplate::new(&fixture.template).expect("template");
    tf_tokenize::message_end_token(&template, &byte_tokenizer(fixture.vocab))
}

/// Starts a chat server on 127.0.0.1 over `fixture`.
pub fn start(fixture: &ChatFixture, setup: &Setup) -> Server {
    let model = tf_models::load(
        &fixtures().join(fixture.path),
        &tf_models::LoadOptions { threads: 2 },
    )
    .expect("load");
    let (message_marker, message_end_token) = if setup.message_starts {
        let m = marker(fixture).expect("the template's messages have a marker");
        (m, end_token(fixture))
    } else {
        (Vec::new(), None)
    };
    let defaults = SchedulerConfig::default();
    let scheduler = SchedulerConfig {
        parallel: 4,
        queue: 64,
        prefill_chunk: 16,
        round_prefill_tokens: 16,
        prompt_cache_bytes: setup.cache_bytes,
        message_marker,
        message_end_token,
        draft_match_tokens: if setup.draft_match > 0 {
            setup.draft_match
        } else {
            defaults.draft_match_tokens
        },
        planted_cache_ignores_tokens: setup.planted_stale_cache,
        planted_unverified_drafts: setup.planted_unverified_drafts,
        ..defaults
    };
    let text = ModelText::new(
        byte_tokenizer(fixture.vocab),
        Some(fixture.template.clone()),
    )
    .expect("text");
    let opts = ServerOptions {
        addr: "127.0.0.1:0".into(),
        name: fixture.path.into(),
        api_keys: vec![],
        max_tokens: None,
        scheduler,
        log_requests: false,
        live_display: false,
    };
    Server::start(model, text, opts).expect("start")
}

/// A client of `server`.
pub fn client(server: &Server) -> Client {
    Client::new(&format!("http://{}", server.addr()), None)
}

/// The value of a Prometheus sample `name` in `server`'s /metrics.
pub fn metric(server: &Server, name: &str) -> f64 {
    let text = client(server).get_text("/metrics").expect("/metrics");
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics:\n{text}"))
}
