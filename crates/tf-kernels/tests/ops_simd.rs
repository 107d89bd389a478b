//! Every ISA path of the vector primitives equals the portable definition bit for bit, and the
//! contract `exp` / `silu` stay within their stated accuracy.

use tf_kernels::contract::Rng;
use tf_kernels::ops::simd::{self, portable, Isa, IsaKind};

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

/// Lengths around every SIMD boundary (8, 16) and real model widths.
fn lengths() -> Vec<usize> {
    (0..=70)
        .chain([100, 127, 128, 129, 576, 1536, 4099])
        .collect()
}

#[test]
fn reductions_equal_portable_on_every_isa() {
    let isas = Isa::available();
    eprintln!(
        "available ISA paths: {:?}",
        isas.iter().map(|i| i.kind()).collect::<Vec<_>>()
    );
    let mut rng = Rng::new(42);
    for n in lengths() {
        let a = rng.vec_normal(n, 3.0);
        let b = rng.vec_normal(n, 3.0);
        for &isa in &isas {
            let k = isa.kind();
            assert_eq!(
                simd::dot(isa, &a, &b).to_bits(),
                portable::dot(&a, &b).to_bits(),
                "dot {k:?} n={n}"
            );
            assert_eq!(
                simd::sum(isa, &a).to_bits(),
                portable::sum(&a).to_bits(),
                "sum {k:?} n={n}"
            );
            assert_eq!(
                simd::max(isa, &a).to_bits(),
                portable::max(&a).to_bits(),
                "max {k:?} n={n}"
            );
        }
    }
}

#[test]
fn elementwise_equal_portable_on_every_isa() {
    let mut rng = Rng::new(7);
    for n in lengths() {
        // Wide range so exp hits its overflow / underflow clamps.
        let x = rng.vec_uniform(n, -100.0, 100.0);
        let y = rng.vec_normal(n, 2.0);
        let mut want = vec![0.0; n];
        let mut got = vec![0.0; n];
        for &isa in &Isa::available() {
            let k = isa.kind();
            portable::exp_shifted(&x, 0.5, &mut want);
            simd::exp_shifted(isa, &x, 0.5, &mut got);
            assert_eq!(bits(&got), bits(&want), "exp_shifted {k:?} n={n}");
            portable::silu_mul(&x, &y, &mut want);
            simd::silu_mul(isa, &x, &y, &mut got);
            assert_eq!(bits(&got), bits(&want), "silu_mul {k:?} n={n}");
            portable::scale_mul(&x, 0.37, &y, &mut want);
            simd::scale_mul(isa, &x, 0.37, &y, &mut got);
            assert_eq!(bits(&got), bits(&want), "scale_mul {k:?} n={n}");
            want.copy_from_slice(&y);
            got.copy_from_slice(&y);
            portable::axpy(-1.25, &x, &mut want);
            simd::axpy(isa, -1.25, &x, &mut got);
            assert_eq!(bits(&got), bits(&want), "axpy {k:?} n={n}");
        }
    }
}

#[test]
fn planted_isa_difference_is_detected() {
    // Control: a plain sequential sum differs from the 16-lane order on these inputs, so the
    // bitwise comparisons above are able to fail.
    let x = Rng::new(3).vec_normal(1000, 1.0);
    let sequential: f32 = x.iter().sum();
    assert_ne!(sequential.to_bits(), portable::sum(&x).to_bits());
}

#[test]
fn widest_path_is_active_unless_overridden() {
    if std::env::var("TF_KERNELS_ISA").is_err() {
        assert_eq!(Some(&Isa::active()), Isa::available().last());
    }
    assert_eq!(Isa::new(IsaKind::Portable), Some(Isa::PORTABLE));
}

fn ulp_diff(a: f32, b: f64) -> f64 {
    let b32 = b as f32;
    let ulp = (f32::from_bits(b32.abs().to_bits() + 1) - b32.abs()) as f64;
    (a as f64 - b).abs() / ulp
}

#[test]
fn contract_exp_within_two_ulp() {
    let mut worst = 0.0f64;
    let mut x = portable::EXP_LO;
    while x < portable::EXP_HI {
        let got = portable::exp(x);
        let want = (x as f64).exp();
        if want >= f32::MIN_POSITIVE as f64 {
            worst = worst.max(ulp_diff(got, want));
        }
        x += 0.000_731;
    }
    eprintln!("contract exp: worst error {worst:.3} ulp");
    assert!(worst <= 2.0, "exp worst error {worst} ulp");
    assert_eq!(portable::exp(0.0), 1.0);
    assert_eq!(portable::exp(100.0), f32::INFINITY);
    assert_eq!(portable::exp(f32::NEG_INFINITY), 0.0);
    assert!(portable::exp(f32::NAN).is_nan());
    // Control: a truncated polynomial (degree 3) is far outside 2 ulp.
    let crude = |x: f32| 1.0 + x + x * x / 2.0 + x * x * x / 6.0;
    assert!(ulp_diff(crude(0.3), 0.3f64.exp()) > 2.0);
}

#[test]
fn contract_silu_close_to_f64() {
    let mut rng = Rng::new(11);
    for _ in 0..100_000 {
        let x = rng.uniform(-30.0, 30.0);
        let want = x as f64 / (1.0 + (-(x as f64)).exp());
        let got = portable::silu(x) as f64;
        assert!(
            (got - want).abs() <= 4e-7 * want.abs() + 1e-30,
            "silu({x}) = {got}, want {want}"
        );
    }
    assert_eq!(portable::silu(-200.0), -0.0);
    assert_eq!(portable::silu(200.0), 200.0);
}

#[test]
fn row_primitives_equal_portable_on_every_isa() {
    let mut rng = Rng::new(21);
    // Widths around the 8/16/64-element blocks; strides larger than the width (GQA layouts).
    for width in [1usize, 7, 8, 15, 16, 37, 64, 65, 100, 128, 130] {
        for rows in [0usize, 1, 3, 17, 64] {
            let stride = width * 3 + 1;
            let base = rng.vec_normal(rows.max(1) * stride, 1.0);
            let q = rng.vec_normal(width, 1.0);
            let p = rng.vec_uniform(rows, 0.0, 1.0);
            let init = rng.vec_normal(width, 1.0);
            let mut want_s = vec![0.0; rows];
            portable::dot_rows(&q, &base, stride, 0.125, &mut want_s);
            let mut want_a = init.clone();
            portable::axpy_rows(&p, &base, stride, &mut want_a);
            // The row forms equal the one-row primitives (same order, same fmas).
            for j in 0..rows {
                let d = portable::dot(&q, &base[j * stride..][..width]) * 0.125;
                assert_eq!(want_s[j].to_bits(), d.to_bits());
            }
            for &isa in &Isa::available() {
                let k = isa.kind();
                let mut s = vec![0.0; rows];
                simd::dot_rows(isa, &q, &base, stride, 0.125, &mut s);
                assert_eq!(
                    bits(&s),
                    bits(&want_s),
                    "dot_rows {k:?} w={width} rows={rows}"
                );
                let mut a = init.clone();
                simd::axpy_rows(isa, &p, &base, stride, &mut a);
                assert_eq!(
                    bits(&a),
                    bits(&want_a),
                    "axpy_rows {k:?} w={width} rows={rows}"
                );
            }
        }
    }
}
