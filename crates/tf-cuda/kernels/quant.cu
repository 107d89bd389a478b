// (empty: kernels of quant.rs come here)
