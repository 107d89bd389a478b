//! Reply parsing: splitting generated text into content, reasoning and tool calls.

pub mod parser;
pub mod recipients;
