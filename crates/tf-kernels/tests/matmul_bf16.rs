//! Contract tests for the opt-in bf16-activation variant (`matmul_bf16_activations`):
//! accuracy at bf16 level, row invariance bit for bit across n, neighbours and thread counts,
//! and a control showing it really is the lossy variant (it fails the f32 path's tolerance).
#![cfg(target_arch = "x86_64")]

mod matmul_support;

use matmul_support::*;
use tf_kernels::matmul::{bf16_activations_supported, matmul_bf16_activations, MatmulError};
use tf_kernels::pool::Pool;

const K: usize = 512;

fn run(w: &Owned, x: &[f32], n: usize, pool: &Pool) -> Vec<f32> {
    let mut y = vec![0f32; n * w.rows];
    matmul_bf16_activations(&w.matrix(), x, n, &mut y, pool).expect("bf16 matmul");
    y
}

/// bf16 rounding of both factors (unit roundoff 2⁻⁸ each: ≤ 2⁻⁷ + 2⁻¹⁶ on a product) plus
/// the f32 sum's bound.
fn bf16_tolerance(cols: usize) -> f64 {
    2f64.powi(-7) + 2f64.powi(-16) + tolerance(cols)
}

#[test]
fn unsupported_cpus_get_a_named_error() {
    if bf16_activations_supported() {
        return; // covered by the tests below
    }
    let mut rng = Rng(20);
    let w = Owned::random(
        Fmt::Dense(tf_kernels::matmul::FloatType::F32),
        2,
        32,
        &mut rng,
    );
    let mut y = vec![0f32; 2];
    let r = matmul_bf16_activations(&w.matrix(), &[0.0; 32], 1, &mut y, &Pool::new(1));
    assert_eq!(r, Err(MatmulError::Bf16Unsupported));
}

#[test]
fn bf16_accuracy_every_format_and_control() {
    if !bf16_activations_supported() {
        return; // unsupported_cpus_get_a_named_error asserts the refusal
    }
    let mut rng = Rng(21);
    let pool = Pool::new(2);
    for fmt in all_formats() {
        let w = Owned::random(fmt, 21, K, &mut rng);
        let x = rng.vec(9 * K);
        let y = run(&w, &x, 9, &pool);
        let (yr, ar) = reference_matmul(&w.reference_weights(), 21, K, &x, 9);
        check_close(&y, &yr, &ar, bf16_tolerance(K)).unwrap_or_else(|e| panic!("{fmt:?}: {e}"));
        // Control: the same results must fail the f32 path's tolerance (bf16 rounding is real).
        assert!(
            check_close(&y, &yr, &ar, tolerance(K)).is_err(),
            "{fmt:?}: bf16 variant looks like f32"
        );
    }
    for cols in [1usize, 31, 33, 577] {
        let w = Owned::random(
            Fmt::Dense(tf_kernels::matmul::FloatType::F32),
            7,
            cols,
            &mut rng,
        );
        let x = rng.vec(5 * cols);
        let (yr, ar) = reference_matmul(&w.reference_weights(), 7, cols, &x, 5);
        check_close(&run(&w, &x, 5, &pool), &yr, &ar, bf16_tolerance(cols)).unwrap();
    }
}

#[test]
fn bf16_row_invariance_and_threads() {
    if !bf16_activations_supported() {
        return;
    }
    let mut rng = Rng(22);
    let pools = [Pool::new(1), Pool::new(2), Pool::new(3)];
    for fmt in [
        Fmt::Gguf(tf_formats::gguf::GgmlType::Q4_1),
        Fmt::Gguf(tf_formats::gguf::GgmlType::Q8_0),
        Fmt::Gguf(tf_formats::gguf::GgmlType::Q6K),
    ] {
        let w = Owned::random(fmt, 27, K, &mut rng);
        let x = rng.vec(100 * K);
        let solo: Vec<Vec<f32>> = (0..100)
            .map(|i| run(&w, &x[i * K..(i + 1) * K], 1, &pools[1]))
            .collect();
        let mut ns: Vec<usize> = (1..=64).collect();
        ns.extend([67, 100]);
        for n in ns {
            for off in [0, (100 - n) / 2, 100 - n] {
                let y = run(&w, &x[off * K..(off + n) * K], n, &pools[1]);
                for i in 0..n {
                    check_bits(
                        &format!("{fmt:?} n={n} off={off} row {i}"),
                        &y[i * 27..(i + 1) * 27],
                        &solo[off + i],
                    )
                    .unwrap();
                }
            }
        }
        let base = run(&w, &x[..20 * K], 20, &pools[0]);
        for pool in &pools[1..] {
            check_bits(
                &format!("{fmt:?} threads={}", pool.threads()),
                &run(&w, &x[..20 * K], 20, pool),
                &base,
            )
            .unwrap();
        }
    }
}
