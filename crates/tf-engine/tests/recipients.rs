//! The Muse Spark reply format: messages addressed to recipients, parsed whole and streamed.
use serde_json::{json, Value};
use tf_engine::reply::parser::ReplyDelta;
use tf_engine::reply::recipients::*;

const REPLY: &str = "to=self<|message|>The user wants weather; call the tool.<|eom|>\
<|start|>assistant to=get_weather<|message|><atem:function_calls>\
<atem:invoke name=\"get_weather\"><atem:parameter name=\"city\">Paris</atem:parameter>\
<atem:parameter name=\"days\">2</atem:parameter></atem:invoke>\
<atem:invoke name=\"get_time\"><atem:parameter name=\"tz\">\"CET\"</atem:parameter></atem:invoke>\
</atem:function_calls><|eom|>\
<|start|>assistant to=user<|message|>Looking it up: <b>soon</b>.<|eot|>";

fn whole(text: &str) -> ParsedReply {
    parse_reply(text)
}

/// Feeds `text` in pieces cut at `cuts` (byte offsets on char boundaries).
fn streamed(text: &str, cuts: &[usize]) -> (ParsedReply, Vec<ReplyDelta>) {
    let mut p = RecipientParser::new();
    let mut deltas = Vec::new();
    let mut last = 0;
    for &c in cuts.iter().chain(std::iter::once(&text.len())) {
        if c > last && text.is_char_boundary(c) {
            deltas.extend(p.feed(&text[last..c]));
            last = c;
        }
    }
    deltas.extend(p.feed(&text[last..]));
    deltas.extend(p.finish());
    (collect(&deltas), deltas)
}

#[test]
fn whole_reply_splits_into_reasoning_calls_and_answer() {
    let r = whole(REPLY);
    assert_eq!(
        r.reasoning.as_deref(),
        Some("The user wants weather; call the tool.")
    );
    assert_eq!(r.content.as_deref(), Some("Looking it up: <b>soon</b>."));
    assert_eq!(r.tool_calls.len(), 2);
    assert_eq!(r.tool_calls[0].name, "get_weather");
    let args: Value = serde_json::from_str(&r.tool_calls[0].arguments).unwrap();
    assert_eq!(args, json!({"city": "Paris", "days": 2}));
    assert_eq!(r.tool_calls[1].name, "get_time");
    assert_eq!(r.tool_calls[1].arguments, r#"{"tz":"CET"}"#);
    let msg = r.to_openai_message();
    assert_eq!(msg["tool_calls"][1]["function"]["name"], "get_time");
    assert_eq!(msg["tool_calls"][0]["type"], "function");
    assert_eq!(msg["tool_calls"][0]["id"], "call_0");
    assert_eq!(
        msg["reasoning_content"],
        "The user wants weather; call the tool."
    );
}

#[test]
fn streaming_in_any_pieces_equals_whole() {
    let want = whole(REPLY);
    // Every single cut, every char, and pieces that are whole special tokens.
    for c in 0..REPLY.len() {
        assert_eq!(streamed(REPLY, &[c]).0, want, "cut at {c}");
    }
    let chars: Vec<usize> = REPLY.char_indices().map(|(i, _)| i).collect();
    let (r, deltas) = streamed(REPLY, &chars);
    assert_eq!(r, want);
    // Streaming really streams: the answer arrives in several content deltas.
    let contents = deltas
        .iter()
        .filter(|d| matches!(d, ReplyDelta::Content(_)))
        .count();
    assert!(contents > 5, "{contents} content deltas");
    let mut cuts = Vec::new();
    for m in ["<|eom|>", "<|eot|>", "<|start|>", "<|message|>"] {
        for (i, _) in REPLY.match_indices(m) {
            cuts.extend([i, i + m.len()]);
        }
    }
    cuts.sort();
    assert_eq!(streamed(REPLY, &cuts).0, want);
}

#[test]
fn no_marker_fragment_leaks_into_content() {
    let (_, deltas) = streamed("to=user<|message|>ab<|eot|>", &[20, 21, 22, 23, 24]);
    for d in &deltas {
        if let ReplyDelta::Content(t) = d {
            assert!(!t.contains('<'), "leaked {t:?}");
        }
    }
}

#[test]
fn stops_on_eot_never_on_eom() {
    assert_eq!(stop_strings(), &["<|eot|>"]);
    let vocab = |s: &str| match s {
        "<|eot|>" => Some(200001),
        "<|eom|>" => Some(200008),
        _ => None,
    };
    assert_eq!(stop_token_ids(vocab), vec![200001]);
    // Planted control: a message that ends with <|eom|> continues the turn.
    let r = whole("to=self<|message|>a<|eom|><|start|>assistant to=user<|message|>b<|eot|>");
    assert_eq!(r.content.as_deref(), Some("b"));
}

#[test]
fn json_arguments_addressed_to_a_tool() {
    let r = whole("to=functions.lookup<|message|>{\"q\": \"rust\", \"n\": 3}<|eom|>");
    assert_eq!(r.tool_calls.len(), 1);
    assert_eq!(r.tool_calls[0].name, "lookup");
    let args: Value = serde_json::from_str(&r.tool_calls[0].arguments).unwrap();
    assert_eq!(args, json!({"q": "rust", "n": 3}));
    assert_eq!(r.content, None);
}

#[test]
fn commentary_is_content_and_generation_may_end_without_eot() {
    let r = whole("to=commentary<|message|>Working");
    assert_eq!(r.content.as_deref(), Some("Working"));
    let r = whole("to=self<|message|>still thinking");
    assert_eq!(r.reasoning.as_deref(), Some("still thinking"));
}

#[test]
fn malformed_replies_come_back_as_content() {
    let cases: &[(&str, &str)] = &[
        ("Hello there<|eot|>", "Hello there"),
        (
            "assistant hi<|message|>x<|eot|>",
            "assistant hi<|message|>x",
        ),
        (
            "to=foo<|message|>not json<|eom|>",
            "to=foo<|message|>not json<|eom|>",
        ),
        (
            "to=foo<|message|><atem:function_calls><atem:invoke name=\"x\">",
            "to=foo<|message|><atem:function_calls><atem:invoke name=\"x\">",
        ),
        ("to=user<|message|>done<|eot|>trailing", "donetrailing"),
        ("<|eom|><|eom|>", "<|eom|><|eom|>"),
        ("", ""),
    ];
    for (text, want) in cases {
        let r = whole(text);
        assert_eq!(r.content.as_deref().unwrap_or(""), *want, "input {text:?}");
        assert!(r.tool_calls.is_empty(), "input {text:?}");
        for c in [1, 3, 7] {
            assert_eq!(streamed(text, &[c]).0, r, "input {text:?} cut at {c}");
        }
    }
    let long = format!("to=user {}", "x".repeat(300));
    assert_eq!(whole(&long).content.as_deref(), Some(long.as_str()));
}

#[test]
fn arbitrary_marker_soup_never_panics_and_loses_no_text() {
    let atoms = [
        "<|eom|>",
        "<|eot|>",
        "<|start|>",
        "<|message|>",
        "to=self",
        "to=user",
        "to=t",
        "assistant ",
        "<atem:function_calls>",
        "{\"a\":1}",
        "x",
        "<|",
        "é",
    ];
    let mut s = 0x9e3779b97f4a7c15u64;
    for _ in 0..2000 {
        let mut text = String::new();
        for _ in 0..(s % 9) {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            text.push_str(atoms[(s >> 33) as usize % atoms.len()]);
        }
        let r = whole(&text);
        let cut = (s >> 40) as usize % (text.len() + 1);
        assert_eq!(streamed(&text, &[cut]).0, r, "{text:?}");
        let kept: usize = r.content.iter().chain(&r.reasoning).map(|t| t.len()).sum();
        assert!(kept <= text.len());
    }
}

fn chat_fixture(name: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/muse_spark/chat")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn tool_results_render_as_the_template_does() {
    let messages: Vec<Value> = serde_json::from_str(&chat_fixture("conversation.json")).unwrap();
    let want = chat_fixture("expected.txt");
    assert_eq!(render_conversation(&messages, true), want);
    // Without `name`, a tool message takes its call's name.
    let mut unnamed = messages.clone();
    unnamed[3].as_object_mut().unwrap().remove("name");
    assert_eq!(render_conversation(&unnamed, true), want);
    // Planted control: a wrong tool name changes the rendering.
    let mut wrong = messages.clone();
    wrong[3]["name"] = "other".into();
    assert_ne!(render_conversation(&wrong, true), want);
    assert_eq!(
        render_tool_result("add", "5"),
        "<|start|>tool from=add<|message|>5<|eom|>"
    );
}

#[test]
fn a_rendered_assistant_turn_parses_back() {
    let messages: Vec<Value> = serde_json::from_str(&chat_fixture("conversation.json")).unwrap();
    let turn = &messages[2];
    let text = render_conversation(std::slice::from_ref(turn), false);
    // The model writes the turn after the prompt's "<|start|>assistant ".
    let reply = text.strip_prefix("<|start|>assistant ").unwrap();
    let r = whole(reply);
    assert_eq!(r.reasoning.as_deref(), turn["reasoning_content"].as_str());
    assert_eq!(r.content, None);
    let names: Vec<&str> = r.tool_calls.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["get_weather", "add"]);
    for (c, m) in r
        .tool_calls
        .iter()
        .zip(turn["tool_calls"].as_array().unwrap())
    {
        let args: Value = serde_json::from_str(&c.arguments).unwrap();
        assert_eq!(args, m["function"]["arguments"]);
    }
}
