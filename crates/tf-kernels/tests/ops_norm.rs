//! Kernel contract for RMSNorm (plain, zero-centred, grouped gated) with planted controls.

mod ops_support;

use tf_kernels::contract::{
    assert_catches, assert_contract, CheckConfig, Failure, Rng, RowOp, Tolerance,
};
use tf_kernels::ops::{norm_gain, rms_norm, rms_norm_gated, rms_norm_inplace, NormWeightKind};

const TOL: Tolerance = Tolerance::new(1e-6, 2e-6);

fn norm_op<'a>(
    width: usize,
    gain: &'a [f32],
    eps: f32,
    gen: &'a dyn Fn(&mut Rng, usize) -> Vec<f32>,
    reference: &'a dyn Fn(&Vec<f32>, &mut [f64]),
) -> RowOp<'a, Vec<f32>> {
    let _ = (gain, eps);
    RowOp {
        name: "rms_norm",
        out_width: width,
        tolerance: TOL,
        gen_row: gen,
        reference,
    }
}

fn check_width(width: usize, kind: NormWeightKind) {
    let mut rng = Rng::new(width as u64);
    let raw = rng.vec_normal(width, 0.3);
    let gain = norm_gain(&raw, kind);
    let eps = 1e-5f32;
    let gen = move |r: &mut Rng, i: usize| r.vec_normal(width, 1.0 + (i % 5) as f32);
    let g2 = gain.clone();
    let reference = move |x: &Vec<f32>, out: &mut [f64]| {
        out.copy_from_slice(&ops_support::rms_norm(x, &g2, eps));
    };
    let op = norm_op(width, &gain, eps, &gen, &reference);
    let run = |rows: &[Vec<f32>], out: &mut [f32]| {
        let x: Vec<f32> = rows.concat();
        rms_norm(&x, &gain, eps, rows.len(), out).unwrap();
    };
    let rep = assert_contract(&op, &run, &CheckConfig::default());
    assert!(rep.rows_compared > 2000);
    let run_inplace = |rows: &[Vec<f32>], out: &mut [f32]| {
        out.copy_from_slice(&rows.concat());
        rms_norm_inplace(out, &gain, eps, rows.len()).unwrap();
    };
    assert_contract(&op, &run_inplace, &CheckConfig::quick());
}

#[test]
fn rms_norm_contract_real_and_odd_widths() {
    // 576: the default model's hidden size; 1536 its FFN; odd widths exercise SIMD tails.
    for width in [576, 1, 7, 17, 100, 1536] {
        check_width(width, NormWeightKind::Gain);
    }
}

#[test]
fn rms_norm_zero_centred_gain_is_one_plus_w() {
    check_width(64, NormWeightKind::ZeroCentred);
    let w = [0.5f32, -1.0, 0.0];
    assert_eq!(
        norm_gain(&w, NormWeightKind::ZeroCentred),
        vec![1.5, 0.0, 1.0]
    );
    assert_eq!(norm_gain(&w, NormWeightKind::Gain), w.to_vec());
}

#[test]
fn rms_norm_planted_controls_are_caught() {
    let width = 576;
    let gain = Rng::new(1).vec_normal(width, 0.3);
    let eps = 1e-5f32;
    let gen = move |r: &mut Rng, _i: usize| r.vec_normal(width, 1.0);
    let g2 = gain.clone();
    let reference = move |x: &Vec<f32>, out: &mut [f64]| {
        out.copy_from_slice(&ops_support::rms_norm(x, &g2, eps));
    };
    let op = norm_op(width, &gain, eps, &gen, &reference);
    // Control 1: a reduction order that depends on the number of rows (sequential when batched).
    let n_dependent = |rows: &[Vec<f32>], out: &mut [f32]| {
        for (x, o) in rows.iter().zip(out.chunks_exact_mut(width)) {
            let ss: f32 = if rows.len() == 1 {
                tf_kernels::ops::simd::portable::dot(x, x)
            } else {
                x.iter().map(|v| v * v).sum()
            };
            let r = 1.0 / (ss / width as f32 + eps).sqrt();
            for ((o, &v), &g) in o.iter_mut().zip(x).zip(&gain) {
                *o = g * (v * r);
            }
        }
    };
    let f = assert_catches(&op, &n_dependent, &CheckConfig::default());
    assert!(matches!(f, Failure::RowVariance { .. }), "{f}");
    // Control 2: off by one — the mean over width - 1 elements.
    let off_by_one = |rows: &[Vec<f32>], out: &mut [f32]| {
        for (x, o) in rows.iter().zip(out.chunks_exact_mut(width)) {
            let ss: f32 = x[..width - 1].iter().map(|v| v * v).sum();
            let r = 1.0 / (ss / (width - 1) as f32 + eps).sqrt();
            for ((o, &v), &g) in o.iter_mut().zip(x).zip(&gain) {
                *o = g * (v * r);
            }
        }
    };
    let f = assert_catches(&op, &off_by_one, &CheckConfig::quick());
    assert!(matches!(f, Failure::Accuracy { .. }), "{f}");
}

#[test]
fn rms_norm_gated_contract_and_control() {
    // Mamba2-like: width 256 in 4 groups; also 1 group and an odd group size.
    for (width, groups) in [(256usize, 4usize), (96, 1), (105, 7)] {
        let gain = Rng::new(9).vec_normal(width, 0.3);
        let eps = 1e-6f32;
        let gen = move |r: &mut Rng, _i: usize| r.vec_normal(2 * width, 1.5);
        let g2 = gain.clone();
        let reference = move |xz: &Vec<f32>, out: &mut [f64]| {
            let (x, z) = xz.split_at(width);
            out.copy_from_slice(&ops_support::rms_norm_gated(x, z, &g2, eps, groups));
        };
        let op = RowOp {
            name: "rms_norm_gated",
            out_width: width,
            tolerance: Tolerance::new(2e-6, 4e-6),
            gen_row: &gen,
            reference: &reference,
        };
        let run = |rows: &[Vec<f32>], out: &mut [f32]| {
            let x: Vec<f32> = rows.iter().flat_map(|r| r[..width].to_vec()).collect();
            let z: Vec<f32> = rows.iter().flat_map(|r| r[width..].to_vec()).collect();
            rms_norm_gated(&x, &z, &gain, eps, groups, rows.len(), out).unwrap();
        };
        assert_contract(&op, &run, &CheckConfig::default());
        // Control: one RMS over the whole row instead of per group (only differs when groups > 1).
        if groups > 1 {
            let whole_row = |rows: &[Vec<f32>], out: &mut [f32]| {
                let x: Vec<f32> = rows.iter().flat_map(|r| r[..width].to_vec()).collect();
                let z: Vec<f32> = rows.iter().flat_map(|r| r[width..].to_vec()).collect();
                rms_norm_gated(&x, &z, &gain, eps, 1, rows.len(), out).unwrap();
            };
            let f = assert_catches(&op, &whole_row, &CheckConfig::quick());
            assert!(matches!(f, Failure::Accuracy { .. }), "{f}");
        }
    }
}

#[test]
fn rms_norm_refuses_bad_shapes() {
    let mut out = vec![0.0; 8];
    assert!(rms_norm(&[1.0; 8], &[1.0; 4], 1e-5, 3, &mut out).is_err());
    assert!(rms_norm(&[1.0; 8], &[], 1e-5, 2, &mut out).is_err());
    assert!(rms_norm(&[1.0; 8], &[1.0; 4], -1.0, 2, &mut out).is_err());
    assert!(rms_norm(&[1.0; 8], &[1.0; 4], 1e-5, 2, &mut out).is_ok());
    assert!(rms_norm_gated(&[1.0; 8], &[1.0; 8], &[1.0; 8], 1e-5, 3, 1, &mut out).is_err());
}
