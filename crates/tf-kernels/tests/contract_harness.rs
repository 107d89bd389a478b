//! The harness itself: it passes a correct operator and reports each kind of planted failure.

use std::cell::Cell;
use tf_kernels::contract::{
    assert_catches, assert_contract, check, CheckConfig, Failure, Rng, RowOp, Tolerance,
};

/// A toy operator: each output is the running prefix sum of its row (a row-local reduction).
fn prefix_ref(row: &Vec<f32>, out: &mut [f64]) {
    let mut s = 0.0f64;
    for (o, &v) in out.iter_mut().zip(row) {
        s += v as f64;
        *o = s;
    }
}

fn prefix_row(row: &[f32], out: &mut [f32]) {
    let mut s = 0.0f32;
    for (o, &v) in out.iter_mut().zip(row) {
        s += v;
        *o = s;
    }
}

const W: usize = 40;

fn gen(r: &mut Rng, _i: usize) -> Vec<f32> {
    r.vec_normal(W, 1.0)
}

fn op<'a>(
    g: &'a dyn Fn(&mut Rng, usize) -> Vec<f32>,
    reference: &'a dyn Fn(&Vec<f32>, &mut [f64]),
) -> RowOp<'a, Vec<f32>> {
    RowOp {
        name: "prefix sum",
        out_width: W,
        tolerance: Tolerance::new(1e-5, 1e-5),
        gen_row: g,
        reference,
    }
}

#[test]
fn correct_operator_passes_with_a_real_report() {
    let o = op(&gen, &prefix_ref);
    let run = |rows: &[Vec<f32>], out: &mut [f32]| {
        for (r, o) in rows.iter().zip(out.chunks_exact_mut(W)) {
            prefix_row(r, o);
        }
    };
    let rep = assert_contract(&o, &run, &CheckConfig::default());
    // 1..=64 plus 67 and 100.
    assert_eq!(rep.rows_compared, 64 * 65 / 2 + 67 + 100);
    assert!(rep.max_abs_err > 0.0 && rep.max_tol_ratio <= 1.0);
}

#[test]
fn each_failure_kind_is_reported() {
    let o = op(&gen, &prefix_ref);
    let cfg = CheckConfig::default();
    // Accuracy: an off-by-one (exclusive prefix sum).
    let off_by_one = |rows: &[Vec<f32>], out: &mut [f32]| {
        for (r, o) in rows.iter().zip(out.chunks_exact_mut(W)) {
            prefix_row(r, o);
            for (k, &v) in r.iter().enumerate() {
                o[k] -= v;
            }
        }
    };
    assert!(matches!(
        assert_catches(&o, &off_by_one, &cfg),
        Failure::Accuracy { .. }
    ));
    // Row variance: the summation order depends on the number of rows (pairwise when N >= 17).
    let n_dependent = |rows: &[Vec<f32>], out: &mut [f32]| {
        for (r, o) in rows.iter().zip(out.chunks_exact_mut(W)) {
            prefix_row(r, o);
            if rows.len() >= 17 {
                let half: f32 = r[..W / 2].iter().sum();
                let rest: f32 = r[W / 2..].iter().sum();
                o[W - 1] = half + rest;
            }
        }
    };
    match assert_catches(&o, &n_dependent, &cfg) {
        Failure::RowVariance { n_rows, col, .. } => {
            assert!(n_rows >= 17);
            assert_eq!(col, W - 1);
        }
        f => panic!("expected RowVariance, got {f}"),
    }
    // Row variance from the neighbour: a row reads the row before it in the call.
    let neighbour = |rows: &[Vec<f32>], out: &mut [f32]| {
        for (k, (r, o)) in rows.iter().zip(out.chunks_exact_mut(W)).enumerate() {
            prefix_row(r, o);
            if k > 0 {
                o[0] += 1e-7 * rows[k - 1][0];
            }
        }
    };
    assert!(matches!(
        assert_catches(&o, &neighbour, &cfg),
        Failure::RowVariance { .. }
    ));
    // Not repeatable: state that leaks between calls.
    let calls = Cell::new(0u32);
    let stateful = |rows: &[Vec<f32>], out: &mut [f32]| {
        calls.set(calls.get() + 1);
        for (r, o) in rows.iter().zip(out.chunks_exact_mut(W)) {
            prefix_row(r, o);
        }
        if calls.get().is_multiple_of(2) && rows.len() == 100 {
            out[5] = f32::from_bits(out[5].to_bits() ^ 1);
        }
    };
    let f = assert_catches(&o, &stateful, &cfg);
    assert!(
        matches!(
            f,
            Failure::NotRepeatable { .. } | Failure::RowVariance { .. }
        ),
        "{f}"
    );
    // NaN is never within tolerance.
    assert!(!Tolerance::new(1.0, 1.0).admits(f32::NAN, 0.0));
    let nan = |_rows: &[Vec<f32>], out: &mut [f32]| out.fill(f32::NAN);
    assert!(matches!(
        assert_catches(&o, &nan, &cfg),
        Failure::Accuracy { .. }
    ));
}

#[test]
#[should_panic(expected = "NOT caught")]
fn assert_catches_fails_on_a_correct_operator() {
    let o = op(&gen, &prefix_ref);
    let run = |rows: &[Vec<f32>], out: &mut [f32]| {
        for (r, o) in rows.iter().zip(out.chunks_exact_mut(W)) {
            prefix_row(r, o);
        }
    };
    assert_catches(&o, &run, &CheckConfig::quick());
}

#[test]
fn seeded_inputs_are_reproducible_and_seed_dependent() {
    let a: Vec<u64> = (0..4)
        .map({
            let mut r = Rng::new(1);
            move |_| r.next_u64()
        })
        .collect();
    let b: Vec<u64> = (0..4)
        .map({
            let mut r = Rng::new(1);
            move |_| r.next_u64()
        })
        .collect();
    let c: Vec<u64> = (0..4)
        .map({
            let mut r = Rng::new(2);
            move |_| r.next_u64()
        })
        .collect();
    assert_eq!(a, b);
    assert_ne!(a, c);
    let o = op(&gen, &prefix_ref);
    let run = |rows: &[Vec<f32>], out: &mut [f32]| {
        for (r, o) in rows.iter().zip(out.chunks_exact_mut(W)) {
            prefix_row(r, o);
        }
    };
    assert!(check(&o, &run, &CheckConfig::quick().with_seed(99)).is_ok());
}
