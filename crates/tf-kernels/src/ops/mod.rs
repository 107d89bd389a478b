//! Element-wise and attention operators: norms, RoPE, attention over a KV cache, SwiGLU, softmax,
//! the Mamba2 recurrent step and MoE routing.
//!
//! Every operator computes each output row with the same arithmetic and reduction order whatever
//! the number of rows in the call (the kernel contract, see `docs/kernels.md`). The fast paths
//! dispatch on the CPU's ISA at run time and equal the portable definitions bit for bit.

pub mod activation;
pub mod attention;
pub mod elementwise;
pub mod error;
pub mod kv;
pub mod mamba;
pub mod moe;
pub mod norm;
pub mod rope;
pub mod rope_config;
pub mod simd;
pub mod softmax;

pub use activation::{exp, relu2, silu, silu_inplace, silu_mul, silu_mul_fused};
pub use attention::{attend, attend_heads, attend_rows, softcap, AttnParams, AttnRow, AttnScratch};
pub use elementwise::{add, add_inplace, mul_inplace, scale_inplace, softcap_inplace};
pub use error::OpError;
pub use kv::{KvCache, LayerKv};
pub use mamba::{conv1d_step, mamba_step, softplus, ssm_step, MambaParams, MambaState};
pub use moe::{combine, route, sigmoid, DroppedGroups, Pick, RouteParams, RouteScratch};
pub use norm::{norm_gain, rms_norm, rms_norm_gated, rms_norm_inplace, NormWeightKind};
pub use rope::{Rope, RopeAngles, RopeConfig, RopePairing, RopeScaling};
pub use simd::{Isa, IsaKind};
pub use softmax::{log_softmax, log_sum_exp, softmax};
