//! The message marker found from chat templates: the opener every message shares, as ids.

mod common;

use common::*;
use tf_tokenize::{marker_text, message_end_token, message_marker, ChatTemplate, Tokenizer};

fn template(name: &str) -> ChatTemplate {
    let source = std::fs::read_to_string(data("templates").join(name)).expect("template");
    ChatTemplate::new(&source).expect("compile")
}

fn chatml_tokenizer() -> Tokenizer {
    Tokenizer::from_file(data("hf_bytelevel").join("tokenizer.json")).expect("tokenizer")
}

#[test]
fn chatml_templates_open_messages_with_im_start() {
    let tok = chatml_tokenizer();
    let im_start = tok.token_id("<|im_start|>").expect("an added token");
    for name in ["smollm2.jinja", "tools_thinking.jinja"] {
        let t = template(name);
        assert_eq!(
            marker_text(&t, tok.bos_token(), tok.eos_token()).as_deref(),
            Some("<|im_start|>"),
            "{name}"
        );
        assert_eq!(message_marker(&t, &tok), Some(vec![im_start]), "{name}");
        let im_end = tok.token_id("<|im_end|>");
        assert_eq!(message_end_token(&t, &tok), im_end, "{name}");
    }
}

#[test]
fn plain_text_openers_are_found_and_their_ids_checked_in_context() {
    let tok = chatml_tokenizer();
    // Llama-3 style (a dated system header before the first message): the header opener.
    let llama = template("roles_strict.jinja");
    assert_eq!(
        marker_text(&llama, "<s>", "</s>").as_deref(),
        Some("<|start_header_id|>")
    );
    // A template framing messages with plain text: the marker is several byte-level tokens,
    // found as ids in the tokenized conversation.
    let at = ChatTemplate::new(
        "{% for m in messages %}@{{ m.role }}: {{ m.content }}\n{% endfor %}\
         {% if add_generation_prompt %}@assistant: {% endif %}",
    )
    .unwrap();
    let ids = message_marker(&at, &tok).expect("a marker");
    assert_eq!(tok.decode(&ids, false).unwrap(), "@");
    let end = message_end_token(&at, &tok).expect("an end token");
    assert_eq!(tok.decode(&[end], false).unwrap(), "\n");
}

#[test]
fn templates_without_a_shared_opener_have_no_marker() {
    let tok = chatml_tokenizer();
    // Mistral style: only user turns are opened; the closing tag follows the last message.
    let mistral = ChatTemplate::new(
        "{{ bos_token }}{% for m in messages %}{% if m.role == 'user' %}[INST] {{ m.content }} \
         [/INST]{% else %}{{ m.content }}{{ eos_token }}{% endif %}{% endfor %}",
    )
    .unwrap();
    assert_eq!(marker_text(&mistral, "<s>", "</s>"), None);
    assert_eq!(message_marker(&mistral, &tok), None);
    assert_eq!(message_end_token(&mistral, &tok), None);
    // Contents alone, separated by blank lines: whitespace is never a marker.
    let bare = ChatTemplate::new("{% for m in messages %}{{ m.content }}\n\n{% endfor %}").unwrap();
    assert_eq!(message_marker(&bare, &tok), None);
    // Planted control: an opener that also closes each message (so it appears twice between
    // contents) is refused, though it prefixes the first message.
    let twice = ChatTemplate::new(
        "{% for m in messages %}<|im_start|>{{ m.content }}<|im_start|>\n{% endfor %}",
    )
    .unwrap();
    assert_eq!(message_marker(&twice, &tok), None);
    // Planted control: a closing token that also opens messages is no end token.
    assert_eq!(message_end_token(&twice, &tok), None);
}

#[test]
fn the_default_model_opens_messages_with_its_im_start_token() {
    let Some(path) = real_model_path() else {
        return;
    };
    let file = tf_formats::gguf::GgufFile::open(&path).expect("open gguf");
    let tok = Tokenizer::from_gguf_metadata(|k| file.get(k)).expect("tokenizer");
    let source = file
        .get("tokenizer.chat_template")
        .and_then(|v| v.as_str())
        .expect("a template");
    let t = ChatTemplate::new(source).expect("compile");
    let id = tok.token_id("<|im_start|>").expect("<|im_start|>");
    assert_eq!(message_marker(&t, &tok), Some(vec![id]));
    assert_eq!(message_end_token(&t, &tok), tok.token_id("<|im_end|>"));
}
