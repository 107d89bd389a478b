//! Muse Spark on the GPU (scaffold).
