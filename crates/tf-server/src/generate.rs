//! The two generating endpoints: render or read the prompt, submit it, and answer whole or as
//! server-sent events.

use crate::error::ApiError;
use crate::protocol::{
    parse, prompt_input, ChatCompletionRequest, CompletionRequest, PromptInput, Settings,
};
use crate::reply::{drive, ChannelSink, Out, ReplySetup};
use crate::shape::{Collected, Kind, Shape};
use crate::App;
use axum::body::Bytes;
use axum::extract::State;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use std::convert::Infallible;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tf_engine::reply::parser::ReplyOptions;
use tf_engine::sampler::seed_from_prompt;
use tf_engine::scheduler::StreamRequest;
use tf_tokenize::ChatRequest;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;

/// `POST /v1/chat/completions`.
pub async fn chat(State(app): State<Arc<App>>, body: Bytes) -> Response {
    app.http.chat.fetch_add(1, Relaxed);
    chat_inner(app, &body)
        .await
        .unwrap_or_else(|e| e.into_response())
}

/// `POST /v1/completions`.
pub async fn completions(State(app): State<Arc<App>>, body: Bytes) -> Response {
    app.http.completions.fetch_add(1, Relaxed);
    completions_inner(app, &body)
        .await
        .unwrap_or_else(|e| e.into_response())
}

async fn chat_inner(app: Arc<App>, body: &[u8]) -> Result<Response, ApiError> {
    let req: ChatCompletionRequest = parse(body)?;
    let settings = req.settings()?;
    let tools = req.tools_enabled();
    let mut messages = req.messages.clone();
    for m in &mut messages {
        if m.role == "developer" {
            m.role = "system".into();
        }
    }
    let tool_list = req.tools.clone().unwrap_or_default();
    crate::tools::adapt(
        &mut messages,
        tools.then_some(tool_list.as_slice()),
        crate::tools::TemplateTools::of(app.text.template.as_deref()),
    );
    let mut chat = ChatRequest {
        messages,
        tools: tools.then(|| Value::Array(tool_list.clone())),
        documents: None,
        add_generation_prompt: true,
        extra: req.chat_template_kwargs.clone().unwrap_or_default(),
    };
    // Clients send a call's arguments as a JSON string; templates index them as a mapping.
    chat.parse_tool_call_arguments();
    let rendered = app.text.render_text(&chat).map_err(|e| {
        ApiError::invalid(
            Some("messages"),
            format!("the chat template failed on this conversation: {e}"),
        )
        .with_code("template_error")
    })?;
    let prompt = app
        .text
        .tokenizer
        .encode(&rendered, false)
        .map_err(|e| ApiError::internal(format!("tokenizing the prompt failed: {e}")))?;
    let think = app.text.has_think_blocks();
    let parser = ReplyOptions {
        think,
        start_in_think: think && rendered.trim_end().ends_with("<think>"),
        tools,
    };
    run(app, Kind::Chat, prompt, settings, parser).await
}

async fn completions_inner(app: Arc<App>, body: &[u8]) -> Result<Response, ApiError> {
    let req: CompletionRequest = parse(body)?;
    let settings = req.settings()?;
    let prompt = match prompt_input(&req.prompt, app.sched.info().vocab_size)? {
        PromptInput::Ids(ids) => ids,
        PromptInput::Text(t) => app
            .text
            .tokenizer
            .encode(&t, true)
            .map_err(|e| ApiError::internal(format!("tokenizing the prompt failed: {e}")))?,
    };
    run(app, Kind::Text, prompt, settings, ReplyOptions::default()).await
}

/// Submits a prompt and answers.
async fn run(
    app: Arc<App>,
    kind: Kind,
    prompt: Vec<u32>,
    s: Settings,
    parser: ReplyOptions,
) -> Result<Response, ApiError> {
    let context = app.sched.info().context;
    let param = if kind == Kind::Chat {
        "messages"
    } else {
        "prompt"
    };
    if prompt.is_empty() {
        return Err(
            ApiError::invalid(Some(param), "the prompt is empty: nothing to condition on")
                .with_code("invalid_value"),
        );
    }
    if prompt.len() >= context {
        return Err(ApiError::invalid(
            Some(param),
            format!("the prompt has {} tokens but the context holds {context} (and the reply needs at least one more): shorten the prompt", prompt.len()),
        )
        .with_code("context_length_exceeded"));
    }
    let room = context - prompt.len();
    let mut max_tokens = s.max_tokens.unwrap_or(room).min(room);
    if let Some(cap) = app.max_tokens {
        max_tokens = max_tokens.min(cap);
    }
    let seed = s.seed.unwrap_or_else(|| seed_from_prompt(&prompt));
    let mut params = s.params.clone();
    params.seed = seed;
    let stop_ids = if s.ignore_eos {
        vec![]
    } else {
        app.text.tokenizer.eos_ids().to_vec()
    };
    let prompt_tokens = prompt.len();
    let (tx, rx) = mpsc::unbounded_channel();
    let req = StreamRequest {
        prompt,
        params,
        max_tokens,
        stop_ids,
        top_logprobs: s.top_logprobs,
        draft: s.draft,
    };
    app.sched.submit(req, Box::new(ChannelSink(tx)))?;
    let n = app.next_id.fetch_add(1, Relaxed);
    let shape = Shape {
        kind,
        id: format!(
            "{}-{:x}{:08x}",
            if kind == Kind::Chat {
                "chatcmpl"
            } else {
                "cmpl"
            },
            app.started_unix,
            n
        ),
        created: unix_now(),
        model: app.name.clone(),
        logprobs: s.top_logprobs.is_some(),
        seed,
    };
    let setup = ReplySetup {
        stop: s.stop.clone(),
        parser,
        prompt_tokens,
    };
    if s.stream {
        Ok(stream(app, shape, rx, setup, s.include_usage))
    } else {
        whole(app, shape, rx, setup).await
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

async fn whole(
    app: Arc<App>,
    shape: Shape,
    rx: mpsc::UnboundedReceiver<tf_engine::scheduler::StreamEvent>,
    setup: ReplySetup,
) -> Result<Response, ApiError> {
    let mut collected = Collected::default();
    let mut end: Option<Result<crate::reply::Summary, String>> = None;
    drive(app.text.clone(), rx, setup, std::future::pending(), |out| {
        match out {
            Out::Piece(d, l) => collected.add(d, l),
            Out::Done(s) => end = Some(Ok(s)),
            Out::Failed(e) => end = Some(Err(e)),
        }
        true
    })
    .await;
    match end {
        Some(Ok(s)) => {
            app.log_reply(&shape.id, &s);
            Ok(axum::Json(shape.whole(&collected, &s)).into_response())
        }
        Some(Err(e)) => Err(ApiError::internal(e)),
        None => Err(ApiError::internal("the reply ended without a result")),
    }
}

fn stream(
    app: Arc<App>,
    shape: Shape,
    rx: mpsc::UnboundedReceiver<tf_engine::scheduler::StreamEvent>,
    setup: ReplySetup,
    include_usage: bool,
) -> Response {
    let (otx, orx) = mpsc::unbounded_channel::<Result<Event, Infallible>>();
    let data = |v: &Value| Ok(Event::default().data(v.to_string()));
    if let Some(first) = shape.first_chunk() {
        let _ = otx.send(data(&first));
    }
    let watcher = otx.clone();
    tokio::spawn(async move {
        let mut offset = 0usize;
        drive(
            app.text.clone(),
            rx,
            setup,
            async move { watcher.closed().await },
            |out| match out {
                Out::Piece(d, l) => match shape.piece_chunk(&d, &l, &mut offset) {
                    Some(chunk) => otx.send(data(&chunk)).is_ok(),
                    None => !otx.is_closed(),
                },
                Out::Done(s) => {
                    app.log_reply(&shape.id, &s);
                    for chunk in shape.final_chunks(&s, include_usage) {
                        let _ = otx.send(data(&chunk));
                    }
                    let _ = otx.send(Ok(Event::default().data("[DONE]")));
                    false
                }
                Out::Failed(e) => {
                    let _ = otx.send(data(&ApiError::internal(e).body()));
                    let _ = otx.send(Ok(Event::default().data("[DONE]")));
                    false
                }
            },
        )
        .await;
    });
    Sse::new(UnboundedReceiverStream::new(orx)).into_response()
}
