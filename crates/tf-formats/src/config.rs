//! config.json, generation_config.json and tokenizer_config.json.
