// Kernels for the GGUF K-quants (Q4_K, Q6_K) and MLX affine (2, 3, 4, 5, 6, 8 bits): the
// matmul, embedding and fused templates of matmul.cu / fused.cu instantiated with the decoders
// of common.cuh (tf_decode_q4_k, tf_decode_q6_k, tf_decode_mlx). Each weight is decoded to the
// f32 the CPU's decode gives, then the same 16-lane fmaf chains and fold: the same bits.

#define TF_QUANT_FORMAT(NAME, FMT, MATMUL)         \
    MATMUL(tf_matmul_##NAME, FMT, 0)               \
    TF_EMBED_ENTRY(tf_embed_##NAME, FMT)           \
    TF_MMF_FORMAT(NAME, FMT)

TF_QUANT_FORMAT(q4_k, FMT_Q4_K, TF_MATMUL_ENTRY)
TF_QUANT_FORMAT(q6_k, FMT_Q6_K, TF_MATMUL_ENTRY)
TF_QUANT_FORMAT(mlx2, FMT_MLX2, TF_MATMUL_ENTRIES)
TF_QUANT_FORMAT(mlx3, FMT_MLX3, TF_MATMUL_ENTRIES)
TF_QUANT_FORMAT(mlx4, FMT_MLX4, TF_MATMUL_ENTRIES)
TF_QUANT_FORMAT(mlx5, FMT_MLX5, TF_MATMUL_ENTRIES)
TF_QUANT_FORMAT(mlx6, FMT_MLX6, TF_MATMUL_ENTRIES)
TF_QUANT_FORMAT(mlx8, FMT_MLX8, TF_MATMUL_ENTRIES)

// Planted controls: the matmul with a deliberately wrong decoder (the suite must catch each).
TF_MATMUL_ENTRY(tf_plant_matmul_q4_k_scale, FMT_PLANT_Q4_K, 0)
TF_MATMUL_ENTRY(tf_plant_matmul_q6_k_scale, FMT_PLANT_Q6_K, 0)
TF_MATMUL_ENTRIES(tf_plant_matmul_mlx4_nibbles, FMT_PLANT_MLX4, 0)
// Passes the contract (accurate, row-invariant) but must differ from the CPU's bits.
TF_MATMUL_ENTRIES(tf_plant_matmul_mlx4_fma, FMT_PLANT_MLX4_FMA, 0)
