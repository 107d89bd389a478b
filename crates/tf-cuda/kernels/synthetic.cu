// (empty: kernels of synthetic.rs come here)
