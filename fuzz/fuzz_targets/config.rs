//! Fuzz target: config.json, generation_config.json and tokenizer_config.json parsing (and
//! the MLX quantization settings and pin-file lines) from arbitrary bytes. Must never panic.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tf_formats::config::{GenerationConfig, ModelConfig, TokenizerConfig};
use tf_formats::pins::Pin;

fuzz_target!(|data: &[u8]| {
    if let Ok(c) = ModelConfig::from_slice(data, "config.json") {
        let _ = (
            c.model_type(),
            c.vocab_size(),
            c.torch_dtype(),
            c.rms_norm_eps(),
        );
        if let Ok(Some(q)) = c.quantization() {
            for module in q.overrides.keys() {
                let _ = q.spec_for(module);
            }
        }
    }
    let _ = GenerationConfig::from_slice(data, "generation_config.json");
    if let Ok(t) = TokenizerConfig::from_slice(data, "tokenizer_config.json") {
        if let Some(ct) = &t.chat_template {
            let _ = ct.get(None);
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = Pin::parse_lines(text);
    }
});
