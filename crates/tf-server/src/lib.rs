//! The OpenAI-compatible HTTP server: chat and text completions (whole or streamed), models,
//! health and Prometheus metrics, over the scheduler's shared rounds.

pub mod client;
mod display;
pub mod drafts_receipt;
pub mod error;
mod generate;
mod info;
pub mod protocol;
pub mod receipts;
pub mod reply;
pub mod resume_receipt;
pub mod shape;
pub mod text;
pub mod tools;

pub use error::ApiError;
pub use text::{ModelText, TextError};

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tf_engine::scheduler::{Scheduler, SchedulerConfig, SchedulerHandle, SubmitError};
use tf_models::Model;

/// How to serve.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Address to bind (`127.0.0.1:8080`; port 0 picks a free one).
    pub addr: String,
    /// The model id clients see.
    pub name: String,
    /// Bearer keys accepted on /v1 (none: open).
    pub api_keys: Vec<String>,
    /// Cap on max_tokens (and the default when a request gives none).
    pub max_tokens: Option<usize>,
    /// Rounds and admission.
    pub scheduler: SchedulerConfig,
    /// One log line per finished request on stderr.
    pub log_requests: bool,
    /// The live status line when stderr is a terminal.
    pub live_display: bool,
}

/// Why the server could not start or stopped badly.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Binding the address failed.
    #[error("cannot listen on {addr}: {source} (is another server on that port? try --port)")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    /// The scheduler refused the configuration.
    #[error(transparent)]
    Scheduler(#[from] SubmitError),
    /// Any other I/O failure of the server.
    #[error("the server failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Per-endpoint request counters.
#[derive(Debug, Default)]
pub(crate) struct HttpCounters {
    pub chat: AtomicU64,
    pub completions: AtomicU64,
}

/// What every handler shares.
pub(crate) struct App {
    pub sched: SchedulerHandle,
    pub text: Arc<ModelText>,
    pub name: String,
    pub api_keys: Vec<String>,
    pub max_tokens: Option<usize>,
    pub started: Instant,
    pub started_unix: u64,
    pub next_id: AtomicU64,
    pub http: HttpCounters,
    pub log_requests: bool,
}

impl App {
    /// Logs one finished request (plain lines, for redirected stderr).
    pub fn log_reply(&self, id: &str, s: &reply::Summary) {
        if self.log_requests {
            let rate = if s.decode_ms > 0.0 {
                s.completion_tokens.saturating_sub(1) as f64 / (s.decode_ms / 1e3)
            } else {
                0.0
            };
            eprintln!(
                "{id}: prompt {} tok, reply {} tok ({}), prefill {:.0} ms, decode {:.1} tok/s",
                s.prompt_tokens, s.completion_tokens, s.finish, s.prefill_ms, rate
            );
        }
    }
}

async fn auth(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    if app.api_keys.is_empty() {
        return next.run(req).await;
    }
    let given = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    match given {
        Some(k) if app.api_keys.iter().any(|a| a == k) => next.run(req).await,
        _ => ApiError::unauthorized().into_response(),
    }
}

async fn fallback(uri: axum::http::Uri) -> Response {
    ApiError::not_found(uri.path()).into_response()
}

fn router(app: Arc<App>) -> Router {
    let v1 = Router::new()
        .route("/v1/chat/completions", post(generate::chat))
        .route("/v1/completions", post(generate::completions))
        .route("/v1/models", get(info::models))
        .route("/v1/models/{id}", get(info::model))
        .layer(axum::middleware::from_fn_with_state(app.clone(), auth));
    Router::new()
        .merge(v1)
        .route("/health", get(info::health))
        .route("/metrics", get(info::metrics))
        .fallback(fallback)
        .layer(axum::extract::DefaultBodyLimit::max(32 << 20))
        .with_state(app)
}

/// A running server: its address, and how to stop it.
pub struct Server {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Result<(), ServerError>>>,
}

impl Server {
    /// Starts the scheduler (which takes `model`) and the HTTP server on a thread of its own.
    /// Returns once the address is bound.
    pub fn start(
        model: Box<dyn Model>,
        text: ModelText,
        opts: ServerOptions,
    ) -> Result<Server, ServerError> {
        let listener =
            std::net::TcpListener::bind(&opts.addr).map_err(|source| ServerError::Bind {
                addr: opts.addr.clone(),
                source,
            })?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let scheduler = Scheduler::start(model, scheduler_config(&opts.scheduler, &text))?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let app = Arc::new(App {
            sched: scheduler.handle(),
            text: Arc::new(text),
            name: opts.name.clone(),
            api_keys: opts.api_keys.clone(),
            max_tokens: opts.max_tokens,
            started: Instant::now(),
            started_unix: now,
            next_id: AtomicU64::new(0),
            http: HttpCounters::default(),
            log_requests: opts.log_requests,
        });
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let live = opts.live_display;
        let thread = std::thread::Builder::new()
            .name("tf-http".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()?;
                let display_stop = Arc::new(AtomicBool::new(false));
                let display = if live {
                    display::spawn(app.sched.clone(), display_stop.clone())
                } else {
                    None
                };
                let result = rt.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener)?;
                    axum::serve(listener, router(app))
                        .with_graceful_shutdown(shutdown_signal(stop_rx))
                        .await
                });
                display_stop.store(true, Ordering::Relaxed);
                if let Some(d) = display {
                    let _ = d.join();
                }
                rt.shutdown_timeout(std::time::Duration::from_secs(5));
                scheduler.shutdown();
                Ok(result?)
            })?;
        Ok(Server {
            addr,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Blocks until the server stops (SIGINT/SIGTERM, or [`Server::shutdown`] elsewhere).
    pub fn wait(mut self) -> Result<(), ServerError> {
        self.join()
    }

    /// Stops taking connections, lets open replies finish, and stops.
    pub fn shutdown(mut self) -> Result<(), ServerError> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        self.join()
    }

    fn join(&mut self) -> Result<(), ServerError> {
        match self.thread.take() {
            Some(t) => t.join().unwrap_or_else(|_| {
                Err(ServerError::Io(std::io::Error::other(
                    "the server thread panicked",
                )))
            }),
            None => Ok(()),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let _ = self.join();
    }
}

/// Resolves on SIGINT, SIGTERM or the stop channel; a second signal exits at once.
async fn shutdown_signal(stop: tokio::sync::oneshot::Receiver<()>) {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    let by_signal = tokio::select! {
        _ = ctrl_c => true,
        _ = term => true,
        _ = stop => false,
    };
    if by_signal {
        eprintln!("\nshutting down: finishing open replies (press Ctrl-C again to quit now)");
        tokio::spawn(async {
            let _ = tokio::signal::ctrl_c().await;
            std::process::exit(130);
        });
    }
}

/// The scheduler configuration with the chat template's message boundaries filled in (where
/// not set): prompt-cache resume points at every message start and after every message end.
fn scheduler_config(cfg: &SchedulerConfig, text: &ModelText) -> SchedulerConfig {
    let mut cfg = cfg.clone();
    let template = text
        .template
        .as_deref()
        .and_then(|s| tf_tokenize::ChatTemplate::new(s).ok());
    if let Some(t) = template {
        if cfg.message_marker.is_empty() {
            cfg.message_marker =
                tf_tokenize::message_marker(&t, &text.tokenizer).unwrap_or_default();
        }
        if cfg.message_end_token.is_none() {
            cfg.message_end_token = tf_tokenize::message_end_token(&t, &text.tokenizer);
        }
    }
    cfg
}
