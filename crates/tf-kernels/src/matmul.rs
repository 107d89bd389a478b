//! Matrix products over packed (quantized) weights.
