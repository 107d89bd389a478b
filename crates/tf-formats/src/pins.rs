//! sha256 pins of a checkpoint's files.
