//! The engine-facing backend (scaffold).
