//! Our chat-template renderings equal transformers' (jinja2) byte for byte.

mod common;

use common::*;
use tf_tokenize::{ChatMessage, ChatRequest, ChatTemplate, TemplateError};

fn template_source(name: &str) -> String {
    std::fs::read_to_string(data("templates").join(name)).expect("template source")
}

#[test]
fn renderings_equal_transformers_byte_for_byte() {
    let text = std::fs::read_to_string(data("template_refs.json")).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let cases = doc["cases"].as_array().unwrap();
    assert!(cases.len() >= 15);
    let (mut rendered, mut raised) = (0, 0);
    let mut failures = Vec::new();
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let source = template_source(case["template"].as_str().unwrap());
        let tmpl = ChatTemplate::new(&source)
            .unwrap()
            .with_fixed_time_utc(case["now_utc"].as_i64().unwrap());
        let request: ChatRequest = serde_json::from_value(case["request"].clone()).unwrap();
        let got = tmpl.render(
            &request,
            case["bos_token"].as_str().unwrap(),
            case["eos_token"].as_str().unwrap(),
        );
        match (
            case.get("output").and_then(|o| o.as_str()),
            case.get("raised").and_then(|r| r.as_str()),
        ) {
            (Some(want), None) => {
                rendered += 1;
                if got.as_deref() != Ok(want) {
                    failures.push(format!("{name}:\n--- want\n{want}\n--- got\n{got:?}"));
                }
            }
            (None, Some(message)) => {
                raised += 1;
                let want = Err(TemplateError::Raised {
                    message: message.to_string(),
                });
                if got != want {
                    failures.push(format!("{name}: want {want:?}, got {got:?}"));
                }
            }
            _ => panic!("case {name} has neither output nor raised"),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    assert!(rendered >= 10 && raised >= 2);
}

#[test]
fn planted_control_a_changed_message_changes_the_rendering() {
    let tmpl = ChatTemplate::new(&template_source("smollm2.jinja")).unwrap();
    let mut req = ChatRequest {
        messages: vec![ChatMessage::text("user", "What is the capital of France?")],
        add_generation_prompt: true,
        ..ChatRequest::default()
    };
    let a = tmpl.render(&req, "<|im_start|>", "<|im_end|>").unwrap();
    req.messages[0] = ChatMessage::text("user", "What is the capital of France!");
    let b = tmpl.render(&req, "<|im_start|>", "<|im_end|>").unwrap();
    assert_ne!(a, b);
    req.add_generation_prompt = false;
    let c = tmpl.render(&req, "<|im_start|>", "<|im_end|>").unwrap();
    assert!(b.ends_with("<|im_start|>assistant\n") && !c.ends_with("<|im_start|>assistant\n"));
}

#[test]
fn real_model_template_comes_from_the_gguf_and_tokenizes() {
    let Some(tok) = real_tokenizer() else { return };
    let source = tok.chat_template(false).unwrap();
    assert_eq!(source, template_source("smollm2.jinja"));
    let tmpl = ChatTemplate::new(source).unwrap();
    let req = ChatRequest {
        messages: vec![ChatMessage::text("user", "Hi")],
        add_generation_prompt: true,
        ..ChatRequest::default()
    };
    let prompt = tmpl.render(&req, tok.bos_token(), tok.eos_token()).unwrap();
    let ids = tok.encode(&prompt, false).unwrap();
    // ChatML markers are single control tokens.
    assert_eq!(ids.iter().filter(|&&id| id == 1).count(), 3);
    assert_eq!(ids.iter().filter(|&&id| id == 2).count(), 2);
    assert_eq!(tok.decode(&ids, false).unwrap(), prompt);
}
