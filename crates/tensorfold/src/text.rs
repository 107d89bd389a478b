//! A model's tokenizer and chat template: now in tf-server, shared with the server.

pub use tf_server::text::ModelText;
