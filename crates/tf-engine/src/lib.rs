//! Streams, rounds of batched rows, per-stream state, the keyed sampler.
