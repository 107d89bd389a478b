//! What a chat template renders: messages, tools and switches.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A message's content: plain text or a list of typed parts (`{"type": "text", "text": ...}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MessageContent {
    /// Plain text.
    Text(String),
    /// Typed parts, passed to the template as they are.
    Parts(Vec<Value>),
}

/// One chat message. Absent (`None`) fields are not shown to the template at all, as
/// transformers drops `None`-valued keys.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `developer`, `user`, `assistant`, `tool`, ...
    pub role: String,
    /// The content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<MessageContent>,
    /// Tool calls made by an assistant message, as given (`{id, type, function: {name, arguments}}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<Value>>,
    /// The call a tool result answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// A participant or tool name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// An assistant message's reasoning (also shown to templates as `thinking`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// Any other keys, passed through (null values dropped).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ChatMessage {
    /// A message with plain-text content.
    pub fn text(role: impl Into<String>, content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: Some(MessageContent::Text(content.into())),
            ..ChatMessage::default()
        }
    }

    /// The message as the template sees it: transformers' key order, with `thinking` first
    /// when there is reasoning, and no null values.
    pub fn to_template_value(&self) -> Value {
        let mut m = Map::new();
        if let Some(r) = &self.reasoning_content {
            m.insert("thinking".into(), Value::String(r.clone()));
        }
        m.insert("role".into(), Value::String(self.role.clone()));
        if let Some(c) = &self.content {
            m.insert(
                "content".into(),
                serde_json::to_value(c).unwrap_or(Value::Null),
            );
        }
        if let Some(tc) = &self.tool_calls {
            m.insert("tool_calls".into(), Value::Array(tc.clone()));
        }
        if let Some(id) = &self.tool_call_id {
            m.insert("tool_call_id".into(), Value::String(id.clone()));
        }
        if let Some(n) = &self.name {
            m.insert("name".into(), Value::String(n.clone()));
        }
        if let Some(r) = &self.reasoning_content {
            m.insert("reasoning_content".into(), Value::String(r.clone()));
        }
        for (k, v) in &self.extra {
            if !v.is_null() && !m.contains_key(k) {
                m.insert(k.clone(), v.clone());
            }
        }
        Value::Object(m)
    }
}

/// A request to render: the conversation, tool definitions and template switches.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    /// The conversation so far.
    pub messages: Vec<ChatMessage>,
    /// Tool definitions (a list of `{type: function, function: {...}}`), or none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Value>,
    /// Documents for retrieval-style templates, or none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub documents: Option<Value>,
    /// Whether to end with the opening of an assistant turn.
    #[serde(default)]
    pub add_generation_prompt: bool,
    /// Extra template variables (`enable_thinking`, `reasoning_effort`, ...).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub extra: Map<String, Value>,
}
