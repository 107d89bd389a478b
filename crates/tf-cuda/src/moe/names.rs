//! The kernel names the device loads from kernels/moe.cu, and the wide-tile entries of
//! kernels/matmul.cu and kernels/fused.cu (listed here, with the expert matmuls' wide entries, so
//! the device's table picks them up through this module).

/// The fixed names, then for each format tag its wide expert matmul, wide plain matmul and the
/// six wide fused matmuls.
macro_rules! kernel_names {
    ([$($fixed:literal),* $(,)?], [$($t:literal),* $(,)?]) => {
        &[
            $($fixed,)*
            $(
                concat!("tf_moe_matmul_wide_", $t),
                concat!("tf_matmul_wide_", $t),
                concat!("tf_mmf_wide_", $t, "_none_store"),
                concat!("tf_mmf_wide_", $t, "_none_add"),
                concat!("tf_mmf_wide_", $t, "_norm_store"),
                concat!("tf_mmf_wide_", $t, "_norm_add"),
                concat!("tf_mmf_wide_", $t, "_silu_store"),
                concat!("tf_mmf_wide_", $t, "_silu_add"),
            )*
        ]
    };
}

/// Kernel entry points defined in kernels/moe.cu, and the wide-tile entries (module docs).
pub const KERNEL_NAMES: &[&str] = kernel_names!(
    [
        "tf_moe_route_grouped",
        "tf_plant_moe_route_tie_high",
        "tf_moe_route_muse",
        "tf_moe_sort",
        "tf_moe_gather",
        "tf_moe_matmul_f32",
        "tf_moe_matmul_f16",
        "tf_moe_matmul_bf16",
        "tf_moe_matmul_q4_0",
        "tf_moe_matmul_q4_1",
        "tf_moe_matmul_q8_0",
        "tf_plant_moe_matmul_q4_1_rowvar",
        "tf_moe_matmul_q4_k",
        "tf_moe_matmul_q6_k",
        "tf_moe_matmul_mlx2",
        "tf_moe_matmul_mlx3",
        "tf_moe_matmul_mlx4",
        "tf_moe_matmul_mlx5",
        "tf_moe_matmul_mlx6",
        "tf_moe_matmul_mlx8",
        "tf_moe_relu2",
        "tf_moe_combine",
        "tf_plant_moe_combine_reversed",
        "tf_moe_take_cols",
        "tf_moe_scale",
        "tf_moe_mul_cols",
        "tf_muse_sigmoid_mul",
        "tf_muse_gated_add",
        "tf_muse_softcap",
        "tf_plant_matmul_wide_q4_1_rowvar",
    ],
    [
        "f32", "f16", "bf16", "q4_0", "q4_1", "q8_0", "q4_k", "q6_k", "mlx2", "mlx3", "mlx4",
        "mlx5", "mlx6", "mlx8",
    ]
);
