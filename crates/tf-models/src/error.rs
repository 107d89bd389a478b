//! Errors of loading and running a model.

use thiserror::Error;

/// What went wrong loading or running a model.
#[derive(Debug, Error)]
pub enum ModelError {
    /// The checkpoint could not be read.
    #[error(transparent)]
    Checkpoint(#[from] tf_formats::checkpoint::CheckpointError),
    /// The family refused the checkpoint before load.
    #[error("{name}: {refusal}", name = refusal.name())]
    Refused { refusal: tf_families::Refusal },
    /// The family validates but has no forward pass in this build yet.
    #[error("the {family} family is validated but cannot run yet in this build")]
    NotYetRunnable { family: &'static str },
    /// A weight the plan names has no usable data.
    #[error("tensor {name}: {why}")]
    BadTensor { name: String, why: String },
    /// A kernel rejected its inputs.
    #[error("kernel: {0}")]
    Kernel(String),
    /// A row does not continue its stream (positions must follow the stream's length).
    #[error("row for stream {stream} is at position {pos} but the stream holds {len} tokens")]
    PositionGap {
        stream: usize,
        pos: usize,
        len: usize,
    },
    /// A token id past the vocabulary.
    #[error("token id {token} is out of range (vocabulary has {vocab} tokens)")]
    TokenOutOfRange { token: u32, vocab: usize },
    /// A position past the model's context.
    #[error("position {pos} is past the context length {context}")]
    ContextExceeded { pos: usize, context: usize },
    /// A device backend failed (a driver call, no free stream slot, ...).
    #[error("{backend} backend: {message}")]
    Backend {
        backend: &'static str,
        message: String,
    },
    /// A row names a stream that is not in the round.
    #[error("row names stream {stream}, but the round has {streams} streams")]
    NoSuchStream { stream: usize, streams: usize },
}

impl From<tf_kernels::matmul::MatmulError> for ModelError {
    fn from(e: tf_kernels::matmul::MatmulError) -> Self {
        ModelError::Kernel(e.to_string())
    }
}

impl From<tf_kernels::ops::OpError> for ModelError {
    fn from(e: tf_kernels::ops::OpError) -> Self {
        ModelError::Kernel(e.to_string())
    }
}
