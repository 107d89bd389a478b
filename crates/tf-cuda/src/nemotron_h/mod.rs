//! Nemotron-H on the GPU (scaffold).
