//! Chat templates: Jinja sources rendered with minijinja the way transformers renders them
//! (trim_blocks, lstrip_blocks, loop controls, Python string methods, its `tojson`,
//! `raise_exception`, `strftime_now`).

mod pyjson;
mod pyrepr;
mod request;

use std::sync::Arc;

use minijinja::value::{Kwargs, Value as JinjaValue};
use minijinja::{Environment, Error, ErrorKind};

pub use pyjson::{dumps as py_json_dumps, py_float_repr, PyJsonOptions};
pub use request::{ChatMessage, ChatRequest, MessageContent};

const TEMPLATE_NAME: &str = "chat_template";

/// Why a chat template could not be compiled or rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// The source is not a template minijinja accepts.
    #[error("chat template does not compile: {message}")]
    Syntax {
        /// The parser's message, with the line.
        message: String,
    },
    /// The template called `raise_exception(message)` (e.g. on a bad role order).
    #[error("chat template refused the conversation: {message}")]
    Raised {
        /// The template's own message.
        message: String,
    },
    /// The tokenizer carries no chat template (of the wanted name).
    #[error("no chat template: {reason}")]
    Missing {
        /// What was looked for.
        reason: String,
    },
    /// Rendering failed for another reason (an undefined method, a type error, ...).
    #[error("chat template failed to render: {message}")]
    Render {
        /// The engine's message, with the line.
        message: String,
    },
}

/// The error `raise_exception` returns; found again in the error chain after rendering.
#[derive(Debug)]
struct RaisedByTemplate(String);

impl std::fmt::Display for RaisedByTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RaisedByTemplate {}

/// Where `strftime_now` takes the time from.
#[derive(Debug, Clone, Copy)]
enum Clock {
    /// The system clock, local time zone (as Python's `datetime.now()`).
    System,
    /// A fixed instant, UTC (seconds since the Unix epoch), for reproducible renders.
    FixedUtc(i64),
}

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
    source: Arc<str>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("source_len", &self.source.len())
            .finish()
    }
}

fn tojson(value: &JinjaValue, kwargs: Kwargs) -> Result<JinjaValue, Error> {
    let opts = PyJsonOptions::from_kwargs(&kwargs)?;
    Ok(JinjaValue::from_safe_string(pyjson::dumps(value, &opts)?))
}

fn raise_exception(message: String) -> Result<JinjaValue, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message.clone())
        .with_source(RaisedByTemplate(message)))
}

fn strftime(clock: Clock, format: &str) -> Result<String, Error> {
    let now = match clock {
        Clock::System => jiff::Zoned::now(),
        Clock::FixedUtc(secs) => jiff::Timestamp::from_second(secs)
            .map_err(|e| Error::new(ErrorKind::InvalidOperation, e.to_string()))?
            .to_zoned(jiff::tz::TimeZone::UTC),
    };
    jiff::fmt::strtime::format(format, &now).map_err(|e| {
        Error::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now({format:?}): {e}"),
        )
    })
}

/// Rewrites transformers' `{% generation %}` / `{% endgeneration %}` markers (which only
/// track assistant spans) into a no-op block, keeping their whitespace control.
fn neutralize_generation_tags(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(start) = rest.find("{%") {
        out.push_str(&rest[..start]);
        let tag = &rest[start..];
        let Some(end) = tag.find("%}") else {
            out.push_str(tag);
            return out;
        };
        let inner = &tag[2..end];
        let (lead, body) = match inner.strip_prefix(['-', '+']) {
            Some(b) => (&inner[..1], b),
            None => ("", inner),
        };
        let (body, trail) = match body.strip_suffix(['-', '+']) {
            Some(b) => (b, &body[body.len() - 1..]),
            None => (body, ""),
        };
        match body.trim() {
            "generation" => out.push_str(&format!("{{%{lead} if true {trail}%}}")),
            "endgeneration" => out.push_str(&format!("{{%{lead} endif {trail}%}}")),
            _ => out.push_str(&tag[..end + 2]),
        }
        rest = &tag[end + 2..];
    }
    out.push_str(rest);
    out
}

fn error_message(e: &Error) -> String {
    let mut msg = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        msg.push_str(&format!(": {s}"));
        src = s.source();
    }
    msg
}

fn raised_message(e: &Error) -> Option<String> {
    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = src {
        if let Some(r) = s.downcast_ref::<RaisedByTemplate>() {
            return Some(r.0.clone());
        }
        src = s.source();
    }
    None
}

impl ChatTemplate {
    /// Compiles a template source.
    pub fn new(source: &str) -> Result<ChatTemplate, TemplateError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_keep_trailing_newline(false);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.set_formatter(pyrepr::formatter);
        env.add_filter("tojson", tojson);
        env.add_function("raise_exception", raise_exception);
        let mut t = ChatTemplate {
            env,
            source: Arc::from(source),
        };
        t.set_clock(Clock::System);
        t.env
            .add_template_owned(TEMPLATE_NAME, neutralize_generation_tags(source))
            .map_err(|e| TemplateError::Syntax {
                message: error_message(&e),
            })?;
        Ok(t)
    }

    /// Compiles the tokenizer's own template: `tool_use` when `with_tools` and it has one,
    /// else `default` (from tokenizer_config.json, chat_template.jinja or GGUF
    /// `tokenizer.chat_template`).
    pub fn from_tokenizer(
        tok: &crate::Tokenizer,
        with_tools: bool,
    ) -> Result<ChatTemplate, TemplateError> {
        let source = tok
            .chat_template(with_tools)
            .ok_or_else(|| TemplateError::Missing {
                reason: "the tokenizer has no `default` chat template; pass one explicitly".into(),
            })?;
        ChatTemplate::new(source)
    }

    /// Makes `strftime_now` report a fixed instant (UTC seconds since the epoch), for
    /// reproducible renders.
    pub fn with_fixed_time_utc(mut self, unix_seconds: i64) -> ChatTemplate {
        self.set_clock(Clock::FixedUtc(unix_seconds));
        self
    }

    fn set_clock(&mut self, clock: Clock) {
        self.env
            .add_function("strftime_now", move |format: String| {
                strftime(clock, &format)
            });
    }

    /// The template source as given.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Renders a request. `bos_token`/`eos_token` are visible to the template by those names;
    /// `request.extra` entries are visible as top-level variables (and may override them).
    pub fn render(
        &self,
        request: &ChatRequest,
        bos_token: &str,
        eos_token: &str,
    ) -> Result<String, TemplateError> {
        let mut ctx = serde_json::Map::new();
        ctx.insert("bos_token".into(), bos_token.into());
        ctx.insert("eos_token".into(), eos_token.into());
        for (k, v) in &request.extra {
            ctx.insert(k.clone(), v.clone());
        }
        let messages = request
            .messages
            .iter()
            .map(ChatMessage::to_template_value)
            .collect();
        ctx.insert("messages".into(), serde_json::Value::Array(messages));
        ctx.insert(
            "tools".into(),
            request.tools.clone().unwrap_or(serde_json::Value::Null),
        );
        ctx.insert(
            "documents".into(),
            request.documents.clone().unwrap_or(serde_json::Value::Null),
        );
        ctx.insert(
            "add_generation_prompt".into(),
            request.add_generation_prompt.into(),
        );
        let tmpl = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| TemplateError::Render {
                message: error_message(&e),
            })?;
        tmpl.render(JinjaValue::from_serialize(&ctx))
            .map_err(|e| match raised_message(&e) {
                Some(message) => TemplateError::Raised { message },
                None => TemplateError::Render {
                    message: error_message(&e),
                },
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_tags_become_no_op_blocks() {
        let src = "a{%- generation -%} b {% endgeneration %}c{% if x %}y{% endif %}";
        assert_eq!(
            neutralize_generation_tags(src),
            "a{%- if true -%} b {% endif %}c{% if x %}y{% endif %}"
        );
        let t = ChatTemplate::new(src).unwrap();
        assert_eq!(t.render(&ChatRequest::default(), "", "").unwrap(), "ab c");
    }

    #[test]
    fn raise_exception_is_a_named_error_and_syntax_errors_are_named() {
        let t = ChatTemplate::new("{{ raise_exception('roles must alternate') }}").unwrap();
        assert_eq!(
            t.render(&ChatRequest::default(), "", ""),
            Err(TemplateError::Raised {
                message: "roles must alternate".into()
            })
        );
        // Planted control: an ordinary render failure is not reported as a raise.
        let t = ChatTemplate::new("{{ 'x'.no_such_method() }}").unwrap();
        assert!(matches!(
            t.render(&ChatRequest::default(), "", ""),
            Err(TemplateError::Render { .. })
        ));
        assert!(matches!(
            ChatTemplate::new("{% if %}"),
            Err(TemplateError::Syntax { .. })
        ));
    }

    #[test]
    fn shared_across_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<ChatTemplate>();
        assert_send_sync::<crate::Tokenizer>();
    }

    #[test]
    fn tojson_kwargs_and_python_methods() {
        let t = ChatTemplate::new(
            "{{ x | tojson }}|{{ x | tojson(indent=2) }}|{{ x | tojson(separators=(',', ':'), sort_keys=true) }}|\
             {{ '  a,b  '.strip().split(',') | tojson }}|{{ {'k': [1, 2.5, none, true]} | tojson }}",
        )
        .unwrap();
        let mut req = ChatRequest::default();
        req.extra.insert(
            "x".into(),
            serde_json::json!({"z": 1, "a": {"é": "<&>"}, "e": []}),
        );
        assert_eq!(
            t.render(&req, "", "").unwrap(),
            "{\"z\": 1, \"a\": {\"é\": \"<&>\"}, \"e\": []}|{\n  \"z\": 1,\n  \"a\": {\n    \"é\": \"<&>\"\n  },\n  \"e\": []\n}|\
             {\"a\":{\"é\":\"<&>\"},\"e\":[],\"z\":1}|[\"a\", \"b\"]|{\"k\": [1, 2.5, null, true]}"
        );
    }

    #[test]
    fn values_print_as_python_prints_them() {
        let t = ChatTemplate::new(
            "{{ n }}|{{ t }}|{{ f }}|{{ big }}|{{ l }}|{{ d }}|{{ u }}|{{ s }}|{{ q }}",
        )
        .unwrap();
        let mut req = ChatRequest::default();
        let extra = serde_json::json!({
            "n": null, "t": true, "f": 1.0, "big": 1e16,
            "l": [1, "a", null, false, 2.5, "it's"], "d": {"k": "v", "n": [1]},
            "s": "plain", "q": ["a\nb\\", "x\"y", "both'\""]
        });
        req.extra = extra.as_object().unwrap().clone();
        // The expected text is what jinja2 prints for the same values.
        assert_eq!(
            t.render(&req, "", "").unwrap(),
            r#"None|True|1.0|1e+16|[1, 'a', None, False, 2.5, "it's"]|{'k': 'v', 'n': [1]}||plain|['a\nb\\', 'x"y', 'both\'"']"#
        );
    }

    #[test]
    fn strftime_now_uses_the_fixed_clock() {
        let t = ChatTemplate::new("{{ strftime_now('%d %b %Y %H:%M') }}")
            .unwrap()
            .with_fixed_time_utc(1_719_792_000);
        assert_eq!(
            t.render(&ChatRequest::default(), "", "").unwrap(),
            "01 Jul 2024 00:00"
        );
    }
}
