//! Tool use with chat templates that know nothing of tools: tool definitions become a system
//! message, and an assistant's earlier tool calls become `<tool_call>` text (the same form the
//! reply parser reads), so the conversation still renders and the model sees its tools.

use serde_json::{json, Value};
use tf_tokenize::{ChatMessage, MessageContent};

/// Which tool features a template renders by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TemplateTools {
    /// It reads `tools`.
    pub definitions: bool,
    /// It reads messages' `tool_calls`.
    pub calls: bool,
}

impl TemplateTools {
    /// What the template `source` mentions.
    pub fn of(source: Option<&str>) -> TemplateTools {
        let s = source.unwrap_or("");
        TemplateTools {
            definitions: s.contains("tools"),
            calls: s.contains("tool_calls"),
        }
    }
}

/// The system text that lists `tools` for a template that cannot.
pub fn tools_prompt(tools: &[Value]) -> String {
    let mut s = String::from(
        "You may call functions. Their signatures are listed in <tools></tools>:\n<tools>\n",
    );
    for t in tools {
        s.push_str(&t.get("function").unwrap_or(t).to_string());
        s.push('\n');
    }
    s.push_str(
        "</tools>\nTo call one, answer with <tool_call>{\"name\": <function name>, \
         \"arguments\": <JSON object>}</tool_call>.",
    );
    s
}

fn text_of(m: &ChatMessage) -> String {
    match &m.content {
        Some(MessageContent::Text(t)) => t.clone(),
        Some(MessageContent::Parts(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        None => String::new(),
    }
}

/// Adapts `messages` to what the template renders: tool definitions as a system message
/// (merged into a leading one) when `tools` is given and the template ignores them; earlier
/// tool calls as `<tool_call>` text when it ignores `tool_calls`; and null contents as "".
pub fn adapt(messages: &mut Vec<ChatMessage>, tools: Option<&[Value]>, t: TemplateTools) {
    if !t.calls {
        for m in messages.iter_mut() {
            let Some(calls) = m.tool_calls.take() else {
                continue;
            };
            let mut text = text_of(m);
            for c in &calls {
                let f = c.get("function").unwrap_or(c);
                let args = match f.get("arguments") {
                    Some(Value::String(s)) => {
                        serde_json::from_str(s).unwrap_or(Value::String(s.clone()))
                    }
                    Some(v) => v.clone(),
                    None => json!({}),
                };
                let call = json!({"name": f.get("name").cloned().unwrap_or(Value::Null), "arguments": args});
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(&format!("<tool_call>\n{call}\n</tool_call>"));
            }
            m.content = Some(MessageContent::Text(text));
        }
    }
    for m in messages.iter_mut() {
        if m.content.is_none() {
            m.content = Some(MessageContent::Text(String::new()));
        }
    }
    if let Some(tools) = tools.filter(|t| !t.is_empty()) {
        if !t.definitions {
            let listing = tools_prompt(tools);
            match messages.first_mut().filter(|m| m.role == "system") {
                Some(sys) => {
                    let text = format!("{}\n\n{listing}", text_of(sys));
                    sys.content = Some(MessageContent::Text(text));
                }
                None => messages.insert(0, ChatMessage::text("system", listing)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn convo() -> Vec<ChatMessage> {
        let mut call = ChatMessage::text("assistant", "");
        call.content = None;
        call.tool_calls = Some(vec![json!({"id": "c1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}})]);
        vec![
            ChatMessage::text("user", "Weather?"),
            call,
            ChatMessage::text("tool", "21C"),
        ]
    }

    #[test]
    fn calls_become_text_and_tools_a_system_message() {
        let tools = [json!({"type": "function", "function": {"name": "get_weather"}})];
        let mut m = convo();
        adapt(
            &mut m,
            Some(&tools),
            TemplateTools {
                definitions: false,
                calls: false,
            },
        );
        assert_eq!(m[0].role, "system");
        assert!(text_of(&m[0]).contains("\"name\":\"get_weather\""));
        // Compared as JSON: key order depends on serde_json's features in the build.
        let text = text_of(&m[2]);
        let body = text
            .strip_prefix("<tool_call>\n")
            .and_then(|t| t.strip_suffix("\n</tool_call>"))
            .expect("tool_call tags");
        let v: Value = serde_json::from_str(body).expect("json");
        assert_eq!(
            v,
            json!({"name": "get_weather", "arguments": {"city": "Paris"}})
        );
        assert!(m[2].tool_calls.is_none());
    }

    #[test]
    fn a_template_that_knows_tools_gets_them_untouched() {
        let tools = [json!({"type": "function", "function": {"name": "get_weather"}})];
        let mut m = convo();
        adapt(
            &mut m,
            Some(&tools),
            TemplateTools {
                definitions: true,
                calls: true,
            },
        );
        assert_eq!(m.len(), 3);
        assert!(m[1].tool_calls.is_some());
    }
}
