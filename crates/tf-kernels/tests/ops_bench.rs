//! Rough timings of the row operators (ignored by default; run with an optimised build:
//! `cargo test -p tf-kernels --release --test ops_bench -- --ignored --nocapture`,
//! and `TF_KERNELS_ISA=portable|avx2|avx512` to compare paths).

use std::hint::black_box;
use std::time::Instant;
use tf_kernels::contract::Rng;
use tf_kernels::ops::{
    attend, rms_norm, silu_mul, softmax, AttnParams, AttnScratch, Isa, LayerKv, Rope, RopeConfig,
    RopePairing, RopeScaling,
};

fn time(name: &str, iters: u32, mut f: impl FnMut()) {
    f();
    let t = Instant::now();
    for _ in 0..iters {
        f();
    }
    let us = t.elapsed().as_secs_f64() * 1e6 / iters as f64;
    eprintln!("{name:<44} {us:>10.2} us");
}

#[test]
#[ignore = "timing only"]
fn bench_ops() {
    eprintln!("ISA path: {:?}", Isa::active().kind());
    let mut rng = Rng::new(1);
    let x = rng.vec_normal(576, 1.0);
    let g = rng.vec_normal(576, 1.0);
    let mut out = vec![0.0; 576];
    time("rms_norm 1 x 576", 100_000, || {
        rms_norm(black_box(&x), &g, 1e-5, 1, &mut out).unwrap()
    });
    let a = rng.vec_normal(1536, 1.0);
    let b = rng.vec_normal(1536, 1.0);
    let mut o = vec![0.0; 1536];
    time("silu_mul 1536", 100_000, || {
        silu_mul(black_box(&a), &b, &mut o).unwrap()
    });
    let logits = rng.vec_normal(49152, 3.0);
    let mut p = vec![0.0; 49152];
    time("softmax 49152", 1_000, || {
        softmax(black_box(&logits), 49152, &mut p).unwrap()
    });
    let rope = Rope::new(RopeConfig {
        head_dim: 64,
        rotary_dim: 64,
        theta: 100_000.0,
        pairing: RopePairing::Half,
        scaling: RopeScaling::None,
    })
    .unwrap();
    let mut q = rng.vec_normal(9 * 64, 1.0);
    time("rope apply 9 heads x 64 (angles included)", 100_000, || {
        rope.apply(black_box(&mut q), 9, 777).unwrap()
    });
    let params = AttnParams {
        n_heads: 9,
        n_kv_heads: 3,
        head_dim: 64,
        scale: 0.125,
        window: None,
        softcap: None,
    };
    let mut kv = LayerKv::new(3, 64).unwrap();
    kv.append(
        &rng.vec_normal(4096 * 192, 1.0),
        &rng.vec_normal(4096 * 192, 1.0),
    )
    .unwrap();
    let mut s = AttnScratch::new();
    let mut ao = vec![0.0; 9 * 64];
    let isa = Isa::active();
    let mut sc = vec![0.0f32; 1024];
    time("dot_rows 64 x 1024 keys (stride 192)", 2_000, || {
        tf_kernels::ops::simd::dot_rows(isa, &q[..64], kv.keys(), 192, 0.125, black_box(&mut sc))
    });
    let mut acc = vec![0.0f32; 64];
    time("axpy_rows 64 x 1024 keys (stride 192)", 2_000, || {
        tf_kernels::ops::simd::axpy_rows(isa, &sc, kv.values(), 192, black_box(&mut acc))
    });
    let mut pr = vec![0.0f32; 1024];
    time("exp_shifted 1024", 2_000, || {
        tf_kernels::ops::simd::exp_shifted(isa, black_box(&sc), 0.5, &mut pr)
    });
    for keys in [128usize, 1024, 4096] {
        time(&format!("attend 9q/3kv x 64, {keys} keys"), 2_000, || {
            attend(black_box(&q), &kv, keys - 1, &params, &mut ao, &mut s).unwrap()
        });
    }
}
