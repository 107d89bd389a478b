//! The tokens that open and close every chat message, found from the chat template itself.
//!
//! The template renders a probe conversation (user, assistant, user) whose contents are
//! distinctive strings. The text before the first content (as rendered, else less a leading
//! BOS token) is the first message's opening; the *marker* is its longest prefix that also
//! opens the other two messages (it appears in the text between each pair of contents). It must
//! appear exactly once between contents and never after the last, and its token ids must appear
//! in the tokenized conversation exactly where its text does (a marker that tokenizes
//! differently in context is useless to a scheduler that looks for ids). For ChatML that is
//! `<|im_start|>`, for Llama 3 `<|start_header_id|>`, for Gemma `<start_of_turn>`. Templates
//! whose messages share no opener (Mistral's `[INST]` wraps only user turns) have none.
//!
//! The *end token* is the first token of the text every content is followed by (`<|im_end|>`,
//! `<|eot_id|>`, `<end_of_turn>`), when that token follows each content and appears nowhere
//! else in the probe conversation. A reply that stopped on it left its stream standing exactly
//! where the next turn's prompt has it.

use crate::{ChatMessage, ChatRequest, ChatTemplate, Tokenizer};

/// Probe contents: distinctive, plain ASCII, unlike any template's framing.
const PROBES: [&str; 3] = ["qv7 probe alpha", "qv8 probe bravo", "qv9 probe charlie"];

/// The token ids that open every message of `template` as `tokenizer` encodes a rendered
/// conversation; None when the template's messages share no such opener (or the probe
/// conversation does not render).
pub fn message_marker(template: &ChatTemplate, tokenizer: &Tokenizer) -> Option<Vec<u32>> {
    let text = marker_text(template, tokenizer.bos_token(), tokenizer.eos_token())?;
    let rendered = probe_render(template, tokenizer.bos_token(), tokenizer.eos_token())?;
    let ids = tokenizer.encode(&rendered, false).ok()?;
    let marker = tokenizer.encode(&text, false).ok()?;
    if marker.is_empty() || count(&ids, &marker) != rendered.matches(text.as_str()).count() {
        return None;
    }
    Some(marker)
}

/// The text that opens every message of `template` (see the module notes); None when there is
/// none.
pub fn marker_text(template: &ChatTemplate, bos: &str, eos: &str) -> Option<String> {
    let text = probe_render(template, bos, eos)?;
    let mut gaps = Vec::with_capacity(PROBES.len());
    let mut at = 0;
    for probe in PROBES {
        let start = at + text.get(at..)?.find(probe)?;
        gaps.push(&text[at..start]);
        at = start + probe.len();
    }
    let tail = &text[at..];
    // The first opening may begin with BOS (or BOS may itself be the opener, as in SmolLM2):
    // try it as rendered, then without a leading BOS.
    let first = gaps[0];
    let stripped = (!bos.is_empty()).then(|| first.strip_prefix(bos)).flatten();
    for g0 in [Some(first), stripped].into_iter().flatten() {
        if let Some(m) = longest_opener(g0, &gaps[1..], tail) {
            return Some(m);
        }
    }
    None
}

/// The longest non-blank prefix of `first` found exactly once in each of `gaps` and never in
/// `tail`.
fn longest_opener(first: &str, gaps: &[&str], tail: &str) -> Option<String> {
    (1..=first.len())
        .rev()
        .filter(|&e| first.is_char_boundary(e))
        .map(|e| &first[..e])
        .find(|cand| {
            !cand.trim().is_empty()
                && gaps.iter().all(|g| g.matches(cand).count() == 1)
                && !tail.contains(cand)
        })
        .map(str::to_string)
}

/// The token that ends every message of `template` (see the module notes); None when the
/// messages share no closing text or its first token also appears elsewhere.
pub fn message_end_token(template: &ChatTemplate, tokenizer: &Tokenizer) -> Option<u32> {
    let (bos, eos) = (tokenizer.bos_token(), tokenizer.eos_token());
    let text = probe_render(template, bos, eos)?;
    let mut after = Vec::with_capacity(PROBES.len());
    let mut at = 0;
    for probe in PROBES {
        let start = at + text.get(at..)?.find(probe)?;
        if at > 0 {
            after.push(&text[at..start]);
        }
        at = start + probe.len();
    }
    after.push(&text[at..]);
    let first = after[0];
    let common = first
        .char_indices()
        .map(|(i, c)| i + c.len_utf8())
        .take_while(|&e| after.iter().all(|g| g.starts_with(&first[..e])))
        .last()?;
    let token = *tokenizer.encode(&first[..common], false).ok()?.first()?;
    let ids = tokenizer.encode(&text, false).ok()?;
    // The token stands wherever the closing text does (a default system message adds one),
    // and nowhere else.
    let closings = text.matches(&first[..common]).count();
    (closings >= PROBES.len() && count(&ids, &[token]) == closings).then_some(token)
}

/// The probe conversation rendered (no generation prompt).
fn probe_render(template: &ChatTemplate, bos: &str, eos: &str) -> Option<String> {
    let request = ChatRequest {
        messages: vec![
            ChatMessage::text("user", PROBES[0]),
            ChatMessage::text("assistant", PROBES[1]),
            ChatMessage::text("user", PROBES[2]),
        ],
        add_generation_prompt: false,
        ..ChatRequest::default()
    };
    template.render(&request, bos, eos).ok()
}

/// Occurrences of `needle` in `hay` (overlapping ones too).
fn count(hay: &[u32], needle: &[u32]) -> usize {
    if needle.is_empty() || hay.len() < needle.len() {
        return 0;
    }
    hay.windows(needle.len()).filter(|w| *w == needle).count()
}
