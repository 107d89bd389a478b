// (empty: kernels of moe.rs come here)
