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

impl ChatRequest {
    /// Turns each tool call's `function.arguments` JSON string into the object it encodes:
    /// OpenAI clients send a string, while Hugging Face templates expect a mapping (they
    /// write `arguments | tojson`). A string that is not a JSON object is left as it is.
    pub fn parse_tool_call_arguments(&mut self) {
        for call in self
            .messages
            .iter_mut()
            .filter_map(|m| m.tool_calls.as_mut())
            .flatten()
        {
            let slot = match call.get_mut("function") {
                Some(f) => f.get_mut("arguments"),
                None => call.get_mut("arguments"),
            };
            if let Some(args) = slot {
                if let Some(parsed) = args
                    .as_str()
                    .and_then(|s| serde_json::from_str::<Value>(s).ok())
                    .filter(Value::is_object)
                {
                    *args = parsed;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_call_arguments_strings_become_objects() {
        let mut req: ChatRequest = serde_json::from_value(json!({
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1, \"b\": [2]}"}},
                    {"id": "b", "type": "function", "function": {"name": "g", "arguments": "not json"}},
                    {"id": "c", "type": "function", "function": {"name": "h", "arguments": "[1]"}}
                ]}
            ]
        }))
        .unwrap();
        assert_eq!(req.messages[1].content, None);
        req.parse_tool_call_arguments();
        let calls = req.messages[1].tool_calls.as_ref().unwrap();
        assert_eq!(calls[0]["function"]["arguments"], json!({"x": 1, "b": [2]}));
        // Key order is kept (templates print it).
        assert_eq!(
            serde_json::to_string(&calls[0]["function"]["arguments"]).unwrap(),
            r#"{"x":1,"b":[2]}"#
        );
        assert_eq!(calls[1]["function"]["arguments"], json!("not json"));
        assert_eq!(calls[2]["function"]["arguments"], json!("[1]"));
    }

    #[test]
    fn template_view_drops_absent_fields_and_aliases_reasoning() {
        let m = ChatMessage {
            role: "assistant".into(),
            content: Some(MessageContent::Text("x".into())),
            reasoning_content: Some("why".into()),
            ..ChatMessage::default()
        };
        let v = m.to_template_value();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, ["thinking", "role", "content", "reasoning_content"]);
    }
}
