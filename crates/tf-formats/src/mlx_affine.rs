//! MLX affine quantization: packing layout, per-module settings, reference dequantizer.
