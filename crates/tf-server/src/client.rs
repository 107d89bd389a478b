//! A small blocking client of this API (for receipts, bench and tests): JSON requests, and
//! streamed replies read as server-sent events up to `[DONE]`.

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::time::Duration;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with an error status.
    #[error("HTTP {status}: {body}")]
    Status { status: u16, body: Value },
    /// The server could not be reached or the connection broke.
    #[error("cannot reach {url}: {message}")]
    Transport { url: String, message: String },
    /// The answer is not what the API promises.
    #[error("unexpected answer from {url}: {message}")]
    Protocol { url: String, message: String },
}

/// A client of one server.
#[derive(Clone)]
pub struct Client {
    base: String,
    key: Option<String>,
    agent: ureq::Agent,
}

impl Client {
    /// A client of the server at `base` (`http://127.0.0.1:8080`), with an optional API key.
    pub fn new(base: &str, key: Option<String>) -> Client {
        Client {
            base: base.trim_end_matches('/').to_string(),
            key,
            agent: ureq::AgentBuilder::new()
                .timeout_connect(Duration::from_secs(10))
                .timeout_read(Duration::from_secs(600))
                .build(),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    fn request(&self, method: &str, path: &str) -> ureq::Request {
        let mut r = self.agent.request(method, &self.url(path));
        if let Some(k) = &self.key {
            r = r.set("authorization", &format!("Bearer {k}"));
        }
        r
    }

    fn answer(
        &self,
        path: &str,
        r: Result<ureq::Response, ureq::Error>,
    ) -> Result<ureq::Response, ClientError> {
        match r {
            Ok(resp) => Ok(resp),
            Err(ureq::Error::Status(status, resp)) => {
                let text = resp.into_string().unwrap_or_default();
                let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
                Err(ClientError::Status { status, body })
            }
            Err(e) => Err(ClientError::Transport {
                url: self.url(path),
                message: e.to_string(),
            }),
        }
    }

    fn json_of(&self, path: &str, resp: ureq::Response) -> Result<Value, ClientError> {
        let text = resp.into_string().map_err(|e| ClientError::Transport {
            url: self.url(path),
            message: e.to_string(),
        })?;
        serde_json::from_str(&text).map_err(|e| ClientError::Protocol {
            url: self.url(path),
            message: format!("{e}: {text}"),
        })
    }

    /// GET `path`, answer as JSON.
    pub fn get(&self, path: &str) -> Result<Value, ClientError> {
        let resp = self.answer(path, self.request("GET", path).call())?;
        self.json_of(path, resp)
    }

    /// GET `path`, answer as text.
    pub fn get_text(&self, path: &str) -> Result<String, ClientError> {
        let resp = self.answer(path, self.request("GET", path).call())?;
        resp.into_string().map_err(|e| ClientError::Transport {
            url: self.url(path),
            message: e.to_string(),
        })
    }

    /// POST a raw body (which need not be valid JSON) to `path`.
    pub fn post_raw(&self, path: &str, body: &str) -> Result<Value, ClientError> {
        let r = self
            .request("POST", path)
            .set("content-type", "application/json")
            .send_string(body);
        let resp = self.answer(path, r)?;
        self.json_of(path, resp)
    }

    /// POST JSON to `path`, answer as JSON.
    pub fn post(&self, path: &str, body: &Value) -> Result<Value, ClientError> {
        self.post_raw(path, &body.to_string())
    }

    /// POST a streaming request; returns the parsed `data:` chunks (without `[DONE]`), failing
    /// if the stream does not end with `[DONE]`.
    pub fn post_stream(&self, path: &str, body: &Value) -> Result<Vec<Value>, ClientError> {
        let mut chunks = Vec::new();
        self.post_stream_with(path, body, |c| {
            chunks.push(c.clone());
            true
        })?;
        Ok(chunks)
    }

    /// POST a streaming request, handing each chunk to `each` (false stops reading and closes
    /// the connection). Returns whether `[DONE]` arrived.
    pub fn post_stream_with(
        &self,
        path: &str,
        body: &Value,
        mut each: impl FnMut(&Value) -> bool,
    ) -> Result<bool, ClientError> {
        let r = self
            .request("POST", path)
            .set("content-type", "application/json")
            .send_string(&body.to_string());
        let resp = self.answer(path, r)?;
        let reader = BufReader::new(resp.into_reader());
        for line in reader.lines() {
            let line = line.map_err(|e| ClientError::Transport {
                url: self.url(path),
                message: e.to_string(),
            })?;
            let Some(data) = line.strip_prefix("data:") else {
                continue;
            };
            let data = data.trim();
            if data == "[DONE]" {
                return Ok(true);
            }
            let v: Value = serde_json::from_str(data).map_err(|e| ClientError::Protocol {
                url: self.url(path),
                message: format!("bad chunk {data:?}: {e}"),
            })?;
            if !each(&v) {
                return Ok(false);
            }
        }
        Err(ClientError::Protocol {
            url: self.url(path),
            message: "the stream ended without data: [DONE]".into(),
        })
    }
}

/// The `tensorfold.token_sha` of a whole reply or of a stream's chunks (the last that has one).
pub fn token_sha(reply: &Value) -> Option<String> {
    reply
        .pointer("/tensorfold/token_sha")
        .and_then(Value::as_str)
        .map(String::from)
}

/// The token_sha carried by a stream's chunks.
pub fn stream_token_sha(chunks: &[Value]) -> Option<String> {
    chunks.iter().rev().find_map(token_sha)
}
