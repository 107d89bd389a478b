//! Streams, rounds of batched rows, per-stream state, the keyed sampler.

pub mod sampler;
pub mod stop;
