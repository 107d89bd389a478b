//! Element-wise and attention operators: norms, RoPE, attention, SwiGLU, embedding rows.
