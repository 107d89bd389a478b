//! Executable forward passes, one module per family, over batched rows of tokens.
//!
//! A round is a list of [`Row`]s — (stream, absolute position, token) — from any number of
//! streams; a family's forward appends each row to its stream's state and returns logits for
//! the rows that ask for them. Every kernel keeps the contract (DESIGN.md), so a row's logits do
//! not depend on the other rows of the round.

mod error;
mod llama;
mod load;
mod model;
pub mod muse_spark;
mod nemotron_h;
pub mod weights;

pub use error::ModelError;
pub use llama::rope_scaling;
pub use load::{load, LoadOptions};
pub use model::{
    candidate_rank, check_rows, DeviceSlot, DraftHead, Model, ModelInfo, Row, RowCandidates,
    RowWant, StreamState,
};
