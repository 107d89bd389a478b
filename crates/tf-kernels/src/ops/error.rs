//! Errors raised by the row operators on bad shapes or parameters.

use thiserror::Error;

/// What went wrong in an operator call; every variant carries the numbers a caller needs.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum OpError {
    /// A buffer's length disagrees with the shape the call describes.
    #[error("{op}: `{what}` has length {got}, expected {expected}")]
    Length {
        /// Operator name.
        op: &'static str,
        /// Which buffer.
        what: &'static str,
        /// Expected length in elements.
        expected: usize,
        /// Actual length in elements.
        got: usize,
    },
    /// A shape parameter is zero or does not divide as required.
    #[error("{op}: bad shape: {detail}")]
    Shape {
        /// Operator name.
        op: &'static str,
        /// What is wrong, with the numbers.
        detail: String,
    },
    /// A query position has no key in the cache (the cache must hold keys 0..=q_pos).
    #[error(
        "attention: query position {q_pos} needs {needed} cached keys, cache holds {cache_len}"
    )]
    PositionBeyondCache {
        /// The query's absolute position.
        q_pos: usize,
        /// Keys needed (q_pos + 1).
        needed: usize,
        /// Keys present.
        cache_len: usize,
    },
    /// A RoPE configuration value is outside its valid range.
    #[error("rope: invalid parameter `{param}` = {value}: {why}")]
    RopeParam {
        /// Parameter name as in config.json.
        param: &'static str,
        /// The offending value.
        value: f64,
        /// The rule it breaks.
        why: &'static str,
    },
    /// A `rope_scaling` type this crate does not implement.
    #[error(
        "rope: unsupported rope_type `{rope_type}` (supported: default, linear, llama3, yarn)"
    )]
    UnsupportedRopeType {
        /// The `rope_type` (or legacy `type`) string from config.json.
        rope_type: String,
    },
    /// A scalar operator parameter is outside its valid range (e.g. eps < 0, cap <= 0).
    #[error("{op}: invalid parameter `{param}` = {value}: {why}")]
    Param {
        /// Operator name.
        op: &'static str,
        /// Parameter name.
        param: &'static str,
        /// The offending value.
        value: f64,
        /// The rule it breaks.
        why: &'static str,
    },
}

/// Checks that `got == expected`, else returns [`OpError::Length`].
pub(crate) fn check_len(
    op: &'static str,
    what: &'static str,
    expected: usize,
    got: usize,
) -> Result<(), OpError> {
    if expected == got {
        Ok(())
    } else {
        Err(OpError::Length {
            op,
            what,
            expected,
            got,
        })
    }
}
