//! Tokenizers (Hugging Face tokenizer.json and GGUF vocabularies, as one type) and chat templates.
