//! Streams, rounds of batched rows, per-stream state, the keyed sampler.

pub mod generate;
pub mod prompt_cache;
pub mod reply;
pub mod sampler;
pub mod scheduler;
pub mod score;
pub mod stop;
