//! The read-only endpoints: `/v1/models`, `/health`, `/metrics`.

use crate::error::ApiError;
use crate::App;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use std::fmt::Write;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

fn model_card(app: &App) -> serde_json::Value {
    json!({
        "id": app.name,
        "object": "model",
        "created": app.started_unix,
        "owned_by": "tensorfold",
        "max_model_len": app.sched.info().context,
    })
}

/// `GET /v1/models`.
pub async fn models(State(app): State<Arc<App>>) -> Response {
    axum::Json(json!({"object": "list", "data": [model_card(&app)]})).into_response()
}

/// `GET /v1/models/{id}`.
pub async fn model(State(app): State<Arc<App>>, Path(id): Path<String>) -> Response {
    if id == app.name {
        return axum::Json(model_card(&app)).into_response();
    }
    let mut e = ApiError::invalid(
        Some("model"),
        format!("no model {id:?}: this server serves {:?}", app.name),
    );
    e.status = axum::http::StatusCode::NOT_FOUND;
    e.code = Some("model_not_found");
    e.into_response()
}

/// `GET /health`: model, status, streams running and waiting, memory.
pub async fn health(State(app): State<Arc<App>>) -> Response {
    let s = app.sched.snapshot();
    let m = app.sched.memory();
    let cfg = app.sched.config();
    axum::Json(json!({
        "status": "ok",
        "model": app.name,
        "family": app.sched.info().family,
        "context": app.sched.info().context,
        "streams": {
            "running": s.running,
            "waiting": s.waiting,
            "parallel": cfg.parallel,
            "queue": cfg.queue,
        },
        "memory": {
            "budget_bytes": m.budget_bytes,
            "weight_bytes": m.weight_bytes,
            "workspace_bytes": m.workspace_bytes,
            "state_bytes": s.state_bytes,
            "reserved_bytes": s.reserved_bytes,
            "state_bytes_per_token": m.state_bytes_per_token,
        },
        "prompt_cache": {
            "budget_bytes": cfg.prompt_cache_bytes,
            "bytes": s.cache_bytes,
            "entries": s.cache_entries,
            "hits": s.cache_hits,
            "reused_tokens": s.cache_reused_tokens,
        },
        "uptime_s": app.started.elapsed().as_secs_f64(),
    }))
    .into_response()
}

/// `GET /metrics`: Prometheus text format.
pub async fn metrics(State(app): State<Arc<App>>) -> Response {
    let s = app.sched.snapshot();
    let m = app.sched.memory();
    let mut out = String::new();
    let mut put = |name: &str, kind: &str, help: &str, value: f64| {
        let _ = writeln!(out, "# HELP tensorfold_{name} {help}\n# TYPE tensorfold_{name} {kind}\ntensorfold_{name} {value}");
    };
    let rate = |n: u64, secs: f64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
    put(
        "requests_total",
        "counter",
        "Requests admitted to a stream slot.",
        s.requests as f64,
    );
    put(
        "requests_finished_total",
        "counter",
        "Streams that finished (stop or length).",
        s.finished as f64,
    );
    put(
        "requests_cancelled_total",
        "counter",
        "Streams whose client left before the end.",
        s.cancelled as f64,
    );
    put(
        "requests_failed_total",
        "counter",
        "Streams the engine failed.",
        s.failed as f64,
    );
    put(
        "requests_rejected_total",
        "counter",
        "Requests refused because the queue was full (429).",
        s.rejected as f64,
    );
    put(
        "prompt_tokens_total",
        "counter",
        "Prompt tokens prefilled.",
        s.prompt_tokens as f64,
    );
    put(
        "generated_tokens_total",
        "counter",
        "Tokens generated.",
        s.generated_tokens as f64,
    );
    put(
        "rounds_total",
        "counter",
        "Batched forward rounds run.",
        s.rounds as f64,
    );
    put(
        "draft_proposed_total",
        "counter",
        "Drafted tokens verified.",
        s.draft_proposed as f64,
    );
    put(
        "draft_accepted_total",
        "counter",
        "Drafted tokens kept (each equal to the keyed sample at its position).",
        s.draft_accepted as f64,
    );
    put(
        "decode_steps_total",
        "counter",
        "Decode steps (one per stream per round; a verified draft window counts once).",
        s.decode_steps as f64,
    );
    put(
        "prefill_seconds_total",
        "counter",
        "Round time attributed to prompt rows.",
        s.prefill_seconds,
    );
    put(
        "decode_seconds_total",
        "counter",
        "Round time attributed to decode rows.",
        s.decode_seconds,
    );
    put(
        "prefill_tokens_per_second",
        "gauge",
        "Prompt tokens per second of prefill time, since start.",
        rate(s.prompt_tokens, s.prefill_seconds),
    );
    put(
        "decode_tokens_per_second",
        "gauge",
        "Generated tokens per second of decode time, since start.",
        rate(s.generated_tokens, s.decode_seconds),
    );
    put(
        "streams_running",
        "gauge",
        "Streams running now.",
        s.running as f64,
    );
    put(
        "queue_depth",
        "gauge",
        "Requests waiting for a stream slot.",
        s.waiting as f64,
    );
    put(
        "kv_cache_bytes",
        "gauge",
        "Bytes of stream state (KV cache) held now.",
        s.state_bytes as f64,
    );
    put(
        "kv_cache_reserved_bytes",
        "gauge",
        "Bytes reserved by running streams at their limits.",
        s.reserved_bytes as f64,
    );
    let room = m.stream_room_bytes();
    put(
        "kv_cache_usage_ratio",
        "gauge",
        "Reserved stream state over the room for it.",
        if room > 0 {
            s.reserved_bytes as f64 / room as f64
        } else {
            0.0
        },
    );
    let cache_budget = app.sched.config().prompt_cache_bytes;
    put(
        "prompt_cache_budget_bytes",
        "gauge",
        "Bytes the prompt cache may hold (--prompt-cache-gib; 0: disabled).",
        cache_budget as f64,
    );
    put(
        "prompt_cache_bytes",
        "gauge",
        "Bytes of retained conversation prefixes held now.",
        s.cache_bytes as f64,
    );
    put(
        "prompt_cache_entries",
        "gauge",
        "Retained conversation prefixes held now.",
        s.cache_entries as f64,
    );
    put(
        "prompt_cache_hits_total",
        "counter",
        "Requests that resumed a retained prefix.",
        s.cache_hits as f64,
    );
    put(
        "prompt_cache_misses_total",
        "counter",
        "Requests that found no usable retained prefix (with the cache on).",
        s.cache_misses as f64,
    );
    put(
        "prompt_cache_reused_tokens_total",
        "counter",
        "Prompt tokens resumed from the prompt cache instead of prefilled.",
        s.cache_reused_tokens as f64,
    );
    put(
        "prompt_cache_evictions_total",
        "counter",
        "Retained prefixes dropped (least recently used) to stay within the budget.",
        s.cache_evictions as f64,
    );
    put(
        "http_chat_requests_total",
        "counter",
        "POST /v1/chat/completions requests.",
        app.http.chat.load(Relaxed) as f64,
    );
    put(
        "http_completions_requests_total",
        "counter",
        "POST /v1/completions requests.",
        app.http.completions.load(Relaxed) as f64,
    );
    ([("content-type", "text/plain; version=0.0.4")], out).into_response()
}
