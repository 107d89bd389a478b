//! Request bodies of the API, parsed strictly by type and checked by range.

use crate::error::ApiError;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{Map, Value};
use tf_engine::sampler::SamplingParams;
use tf_tokenize::ChatMessage;

/// `stop`: one string or a list.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum StopField {
    /// One stop string.
    One(String),
    /// Several.
    Many(Vec<String>),
}

/// `stream_options`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct StreamOptions {
    /// Send a last chunk with the usage.
    pub include_usage: Option<bool>,
}

/// Fields chat and completions share.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Common {
    pub model: Option<String>,
    pub max_tokens: Option<i64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub min_p: Option<f64>,
    pub seed: Option<i64>,
    pub stop: Option<StopField>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub repetition_penalty: Option<f64>,
    pub n: Option<i64>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    pub ignore_eos: Option<bool>,
    /// false: no drafts (the serial reference; the tokens are the same either way).
    pub draft: Option<bool>,
    pub logit_bias: Option<Map<String, Value>>,
    pub response_format: Option<Value>,
}

/// `POST /v1/chat/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatCompletionRequest {
    pub messages: Vec<ChatMessage>,
    pub max_completion_tokens: Option<i64>,
    pub logprobs: Option<bool>,
    pub top_logprobs: Option<i64>,
    pub tools: Option<Vec<Value>>,
    pub tool_choice: Option<Value>,
    pub chat_template_kwargs: Option<Map<String, Value>>,
    /// The shared fields (read from the same body).
    #[serde(skip)]
    pub common: Common,
}

/// `POST /v1/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct CompletionRequest {
    pub prompt: Value,
    /// 0..=5 alternatives per token (the legacy API's integer form).
    pub logprobs: Option<i64>,
    pub echo: Option<bool>,
    pub suffix: Option<String>,
    pub best_of: Option<i64>,
    /// The shared fields (read from the same body).
    #[serde(skip)]
    pub common: Common,
}

/// What a request asks of generation, checked.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Sampling (the seed is filled in once the prompt is known when the request has none).
    pub params: SamplingParams,
    /// The request's seed.
    pub seed: Option<u64>,
    /// Most tokens to generate, as asked.
    pub max_tokens: Option<usize>,
    /// Stop strings.
    pub stop: Vec<String>,
    /// Report logprobs with this many alternatives.
    pub top_logprobs: Option<usize>,
    /// Generate past EOS.
    pub ignore_eos: bool,
    /// Whether the engine may verify drafts for this request.
    pub draft: bool,
    /// Stream the reply as server-sent events.
    pub stream: bool,
    /// Send a usage chunk at the end of a stream.
    pub include_usage: bool,
}

/// A request body that also carries the shared fields.
pub trait WithCommon {
    /// Where the shared fields go.
    fn common_mut(&mut self) -> &mut Common;
}

impl WithCommon for ChatCompletionRequest {
    fn common_mut(&mut self) -> &mut Common {
        &mut self.common
    }
}

impl WithCommon for CompletionRequest {
    fn common_mut(&mut self) -> &mut Common {
        &mut self.common
    }
}

/// Parses a JSON body into `T` and its shared fields, naming the field at fault.
pub fn parse<T: DeserializeOwned + WithCommon>(body: &[u8]) -> Result<T, ApiError> {
    let value = parse_value(body)?;
    let common: Common = typed(value.clone())?;
    let mut t: T = typed(value)?;
    *t.common_mut() = common;
    Ok(t)
}

fn typed<T: DeserializeOwned>(value: Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let param = (path != ".").then_some(path.as_str());
        ApiError::invalid(param, format!("{}: {}", path, e.inner())).with_code("invalid_type")
    })
}

/// Parses a body as a JSON object.
fn parse_value(body: &[u8]) -> Result<Value, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::invalid(None, format!("the body is not valid JSON: {e}"))
            .with_code("invalid_json")
    })?;
    if !value.is_object() {
        return Err(ApiError::invalid(None, "the body must be a JSON object"));
    }
    Ok(value)
}

fn range(name: &str, v: Option<f64>, lo: f64, hi: f64) -> Result<Option<f64>, ApiError> {
    match v {
        Some(x) if !(x.is_finite() && x >= lo && x <= hi) => Err(ApiError::invalid(
            Some(name),
            format!("{name} must be between {lo} and {hi}, got {x}"),
        )
        .with_code("invalid_value")),
        _ => Ok(v),
    }
}

impl Common {
    /// Checks the shared fields; `max_tokens` may come from `max_completion_tokens`.
    pub fn settings(
        &self,
        max_tokens: Option<i64>,
        top_logprobs: Option<usize>,
    ) -> Result<Settings, ApiError> {
        if let Some(n) = self.n {
            if n != 1 {
                return Err(ApiError::invalid(
                    Some("n"),
                    format!("n = {n} is not supported: this server returns exactly one choice per request (n = 1); send separate requests, each with its own seed"),
                )
                .with_code("unsupported_value"));
            }
        }
        if self.logit_bias.as_ref().is_some_and(|b| !b.is_empty()) {
            return Err(ApiError::invalid(
                Some("logit_bias"),
                "logit_bias is not supported: the sampler sees only the model's logits",
            )
            .with_code("unsupported_value"));
        }
        if let Some(kind) = self
            .response_format
            .as_ref()
            .and_then(|f| f.get("type"))
            .and_then(Value::as_str)
            .filter(|&k| k != "text")
        {
            return Err(ApiError::invalid(
                Some("response_format"),
                format!(
                    "response_format {kind:?} is not supported: constrained decoding is not \
                     there yet; ask for JSON in the prompt and parse the reply"
                ),
            )
            .with_code("unsupported_value"));
        }
        let max_tokens = match max_tokens.or(self.max_tokens) {
            Some(m) if m < 1 => {
                return Err(ApiError::invalid(
                    Some("max_tokens"),
                    format!("max_tokens must be at least 1, got {m}"),
                )
                .with_code("invalid_value"))
            }
            Some(m) => Some(usize::try_from(m).unwrap_or(usize::MAX)),
            None => None,
        };
        let temperature = range("temperature", self.temperature, 0.0, 2.0)?.unwrap_or(1.0);
        let top_p = range("top_p", self.top_p, 0.0, 1.0)?.unwrap_or(1.0);
        if top_p <= 0.0 {
            return Err(
                ApiError::invalid(Some("top_p"), "top_p must be greater than 0")
                    .with_code("invalid_value"),
            );
        }
        let top_k = match self.top_k {
            None | Some(-1) | Some(0) => 0,
            Some(k) if k < 0 => {
                return Err(ApiError::invalid(
                    Some("top_k"),
                    format!("top_k must be -1 (off), 0 (off) or positive, got {k}"),
                )
                .with_code("invalid_value"))
            }
            Some(k) => usize::try_from(k).unwrap_or(usize::MAX),
        };
        let min_p = range("min_p", self.min_p, 0.0, 1.0)?.unwrap_or(0.0);
        let presence = range("presence_penalty", self.presence_penalty, -2.0, 2.0)?.unwrap_or(0.0);
        let frequency =
            range("frequency_penalty", self.frequency_penalty, -2.0, 2.0)?.unwrap_or(0.0);
        let repetition =
            range("repetition_penalty", self.repetition_penalty, 0.01, 100.0)?.unwrap_or(1.0);
        let stop = match &self.stop {
            None => vec![],
            Some(StopField::One(s)) => vec![s.clone()],
            Some(StopField::Many(v)) => v.clone(),
        };
        if stop.len() > 16 {
            return Err(ApiError::invalid(Some("stop"), "at most 16 stop strings")
                .with_code("invalid_value"));
        }
        Ok(Settings {
            params: SamplingParams {
                temperature: temperature as f32,
                top_k,
                top_p: top_p as f32,
                min_p: min_p as f32,
                presence_penalty: presence as f32,
                frequency_penalty: frequency as f32,
                repetition_penalty: repetition as f32,
                seed: 0,
            },
            seed: self.seed.map(|s| s as u64),
            max_tokens,
            stop,
            top_logprobs,
            ignore_eos: self.ignore_eos.unwrap_or(false),
            draft: self.draft.unwrap_or(true),
            stream: self.stream.unwrap_or(false),
            include_usage: self
                .stream_options
                .as_ref()
                .and_then(|o| o.include_usage)
                .unwrap_or(false),
        })
    }
}

impl ChatCompletionRequest {
    /// Checks the request; returns its generation settings.
    pub fn settings(&self) -> Result<Settings, ApiError> {
        if self.messages.is_empty() {
            return Err(ApiError::invalid(
                Some("messages"),
                "messages must hold at least one message",
            )
            .with_code("invalid_value"));
        }
        for (i, m) in self.messages.iter().enumerate() {
            if !matches!(
                m.role.as_str(),
                "system" | "developer" | "user" | "assistant" | "tool"
            ) {
                return Err(ApiError::invalid(
                    Some(&format!("messages[{i}].role")),
                    format!(
                        "unknown role {:?}: use system, developer, user, assistant or tool",
                        m.role
                    ),
                )
                .with_code("invalid_value"));
            }
        }
        let top_logprobs = match (self.logprobs.unwrap_or(false), self.top_logprobs) {
            (_, Some(k)) if !(0..=20).contains(&k) => {
                return Err(ApiError::invalid(
                    Some("top_logprobs"),
                    format!("top_logprobs must be between 0 and 20, got {k}"),
                )
                .with_code("invalid_value"))
            }
            (false, Some(k)) if k > 0 => {
                return Err(ApiError::invalid(
                    Some("logprobs"),
                    "top_logprobs needs logprobs: true",
                )
                .with_code("invalid_value"))
            }
            (true, k) => Some(k.unwrap_or(0) as usize),
            (false, _) => None,
        };
        self.common
            .settings(self.max_completion_tokens, top_logprobs)
    }

    /// Whether tool calls are to be parsed (tools given and tool_choice not "none").
    pub fn tools_enabled(&self) -> bool {
        self.tools.as_ref().is_some_and(|t| !t.is_empty())
            && self.tool_choice.as_ref().and_then(Value::as_str) != Some("none")
    }
}

impl CompletionRequest {
    /// Checks the request; returns its generation settings.
    pub fn settings(&self) -> Result<Settings, ApiError> {
        if self.echo == Some(true) {
            return Err(ApiError::invalid(
                Some("echo"),
                "echo is not supported: the prompt is not repeated in the reply",
            )
            .with_code("unsupported_value"));
        }
        if self.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
            return Err(
                ApiError::invalid(Some("suffix"), "suffix (insertion) is not supported")
                    .with_code("unsupported_value"),
            );
        }
        if self.best_of.is_some_and(|b| b != 1) {
            return Err(ApiError::invalid(
                Some("best_of"),
                "best_of other than 1 is not supported",
            )
            .with_code("unsupported_value"));
        }
        let top_logprobs = match self.logprobs {
            None => None,
            Some(k) if (0..=5).contains(&k) => Some(k as usize),
            Some(k) => {
                return Err(ApiError::invalid(
                    Some("logprobs"),
                    format!("logprobs must be between 0 and 5, got {k}"),
                )
                .with_code("invalid_value"))
            }
        };
        let mut s = self.common.settings(None, top_logprobs)?;
        s.max_tokens = s.max_tokens.or(Some(16));
        Ok(s)
    }
}

/// The prompt of a completion: text, or token ids.
#[derive(Debug, Clone, PartialEq)]
pub enum PromptInput {
    /// Text to tokenize.
    Text(String),
    /// Token ids as given.
    Ids(Vec<u32>),
}

/// Reads `prompt`: a string, a list of token ids, or a one-element list of either.
pub fn prompt_input(v: &Value, vocab: usize) -> Result<PromptInput, ApiError> {
    let bad = || {
        ApiError::invalid(
            Some("prompt"),
            "prompt must be a string, a list of token ids, or a one-element list of either (batches of prompts are not supported: send one request per prompt)",
        )
        .with_code("invalid_type")
    };
    match v {
        Value::String(s) => Ok(PromptInput::Text(s.clone())),
        Value::Array(items) if items.len() == 1 && !items[0].is_number() => {
            prompt_input(&items[0], vocab)
        }
        Value::Array(items) => {
            let mut ids = Vec::with_capacity(items.len());
            for item in items {
                let id = item.as_u64().ok_or_else(bad)?;
                if id >= vocab as u64 {
                    return Err(ApiError::invalid(
                        Some("prompt"),
                        format!("token id {id} is outside the vocabulary (0..{vocab})"),
                    )
                    .with_code("invalid_value"));
                }
                ids.push(id as u32);
            }
            Ok(PromptInput::Ids(ids))
        }
        _ => Err(bad()),
    }
}
