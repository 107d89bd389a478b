//! Kernel contract for SwiGLU, squared ReLU, softmax / log-softmax and element-wise ops.

mod ops_support;

use tf_kernels::contract::{
    assert_catches, assert_contract, CheckConfig, Failure, Rng, RowOp, Tolerance,
};
use tf_kernels::ops::{
    add, add_inplace, log_softmax, relu2, silu_mul, silu_mul_fused, softcap_inplace, softmax,
};

fn silu_op<'a>(
    width: usize,
    gen: &'a dyn Fn(&mut Rng, usize) -> Vec<f32>,
    reference: &'a dyn Fn(&Vec<f32>, &mut [f64]),
) -> RowOp<'a, Vec<f32>> {
    RowOp {
        name: "silu_mul",
        out_width: width,
        tolerance: Tolerance::new(1e-30, 6e-7),
        gen_row: gen,
        reference,
    }
}

#[test]
fn silu_mul_contract_and_control() {
    for width in [1536usize, 1, 15, 33, 1000] {
        // Row = [gate | up]; gates span the exp clamps.
        let gen = move |r: &mut Rng, _i: usize| {
            let mut v = r.vec_uniform(width, -95.0, 95.0);
            v.extend(r.vec_normal(width, 2.0));
            v
        };
        let reference = move |row: &Vec<f32>, out: &mut [f64]| {
            for i in 0..width {
                out[i] = ops_support::silu(row[i] as f64) * row[width + i] as f64;
            }
        };
        let op = silu_op(width, &gen, &reference);
        let run = |rows: &[Vec<f32>], out: &mut [f32]| {
            let g: Vec<f32> = rows.iter().flat_map(|r| r[..width].to_vec()).collect();
            let u: Vec<f32> = rows.iter().flat_map(|r| r[width..].to_vec()).collect();
            silu_mul(&g, &u, out).unwrap();
        };
        assert_contract(&op, &run, &CheckConfig::default());
        let fused = |rows: &[Vec<f32>], out: &mut [f32]| {
            silu_mul_fused(&rows.concat(), width, rows.len(), out).unwrap();
        };
        assert_contract(&op, &fused, &CheckConfig::quick());
        // Control: std's exp when batched, the contract exp alone — caught bit for bit.
        let n_dependent = |rows: &[Vec<f32>], out: &mut [f32]| {
            for (row, o) in rows.iter().zip(out.chunks_exact_mut(width)) {
                for i in 0..width {
                    let g = row[i];
                    let e = if rows.len() > 1 {
                        (-g).exp()
                    } else {
                        tf_kernels::ops::exp(-g)
                    };
                    o[i] = g / (1.0 + e) * row[width + i];
                }
            }
        };
        if width >= 33 {
            let f = assert_catches(&op, &n_dependent, &CheckConfig::default());
            assert!(matches!(f, Failure::RowVariance { .. }), "{f}");
        }
    }
}

#[test]
fn relu2_exact() {
    let x = [-2.0f32, -0.0, 0.0, 1.5, 3.0];
    let mut out = [9.0f32; 5];
    relu2(&x, &mut out).unwrap();
    assert_eq!(out, [0.0, 0.0, 0.0, 2.25, 9.0]);
    assert!(relu2(&x, &mut [0.0; 4]).is_err());
}

fn softmax_contract(log: bool) {
    for width in [49152usize, 1, 5, 16, 1000] {
        let gen = move |r: &mut Rng, i: usize| r.vec_normal(width, 1.0 + (i % 4) as f32 * 5.0);
        let reference = move |row: &Vec<f32>, out: &mut [f64]| {
            let x: Vec<f64> = row.iter().map(|&v| v as f64).collect();
            let y = if log {
                ops_support::log_softmax(&x)
            } else {
                ops_support::softmax(&x)
            };
            out.copy_from_slice(&y);
        };
        let tol = if log {
            Tolerance::new(2e-6, 2e-6)
        } else {
            Tolerance::new(1e-12, 4e-6)
        };
        let op = RowOp {
            name: if log { "log_softmax" } else { "softmax" },
            out_width: width,
            tolerance: tol,
            gen_row: &gen,
            reference: &reference,
        };
        let run = |rows: &[Vec<f32>], out: &mut [f32]| {
            let x = rows.concat();
            if log {
                log_softmax(&x, width, out).unwrap()
            } else {
                softmax(&x, width, out).unwrap()
            }
        };
        let cfg = if width > 10_000 {
            CheckConfig::quick()
        } else {
            CheckConfig::default()
        };
        assert_contract(&op, &run, &cfg);
        // Control: normalise over the whole call instead of per row.
        let whole_call = |rows: &[Vec<f32>], out: &mut [f32]| {
            let x = rows.concat();
            let w = x.len();
            if log {
                log_softmax(&x, w, out).unwrap()
            } else {
                softmax(&x, w, out).unwrap()
            }
        };
        if width > 1 || log {
            let f = assert_catches(&op, &whole_call, &CheckConfig::quick());
            assert!(
                matches!(f, Failure::Accuracy { .. } | Failure::RowVariance { .. }),
                "{f}"
            );
        }
    }
}

#[test]
fn softmax_contract_and_control() {
    softmax_contract(false);
}

#[test]
fn log_softmax_contract_and_control() {
    softmax_contract(true);
}

#[test]
fn softmax_refuses_ragged_rows() {
    let mut out = vec![0.0; 10];
    assert!(softmax(&[0.0; 10], 3, &mut out).is_err());
    assert!(softmax(&[0.0; 10], 0, &mut out).is_err());
    assert!(log_softmax(&[0.0; 10], 5, &mut out[..9]).is_err());
}

#[test]
fn elementwise_ops() {
    let mut a = vec![1.0f32, 2.0, 3.0];
    add_inplace(&mut a, &[0.5, 0.5, 0.5]).unwrap();
    assert_eq!(a, [1.5, 2.5, 3.5]);
    let mut o = vec![0.0; 3];
    add(&a, &[1.0, 1.0, 1.0], &mut o).unwrap();
    assert_eq!(o, [2.5, 3.5, 4.5]);
    assert!(add_inplace(&mut a, &[1.0]).is_err());
    let mut x = vec![0.0f32, 30.0, -1000.0, 1e-3];
    softcap_inplace(&mut x, 30.0).unwrap();
    assert_eq!(x[0], 0.0);
    assert!((x[1] - 30.0 * 1f32.tanh()).abs() < 1e-5);
    assert!((x[2] + 30.0).abs() < 1e-5);
    assert!((x[3] - 1e-3).abs() < 1e-9);
    assert!(softcap_inplace(&mut x, 0.0).is_err());
}
