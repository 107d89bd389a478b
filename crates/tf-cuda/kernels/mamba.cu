// (empty: kernels of mamba.rs come here)
