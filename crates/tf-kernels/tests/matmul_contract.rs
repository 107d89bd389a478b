//! The kernel contract for `matmul`: accuracy against the reference, bit-exact decoding, and
//! row invariance (bit for bit across n, neighbours, thread counts and SIMD levels), with
//! planted controls showing each check can fail.

mod matmul_support;

use matmul_support::*;
use tf_kernels::matmul::{embedding_row, matmul, matmul_with_level, FloatType, SimdLevel};
use tf_kernels::pool::Pool;

/// Columns used for the generic cases: a multiple of every block/group size (256, 128).
const K: usize = 512;

fn run(w: &Owned, x: &[f32], n: usize, pool: &Pool) -> Vec<f32> {
    let mut y = vec![0f32; n * w.rows];
    matmul(&w.matrix(), x, n, &mut y, pool).expect("matmul");
    y
}

#[test]
fn decoded_weights_equal_reference() {
    let mut rng = Rng(1);
    for fmt in all_formats() {
        let w = Owned::random(fmt, 5, K, &mut rng);
        let reference = w.reference_weights();
        let mut row = vec![0f32; K];
        for r in 0..w.rows {
            embedding_row(&w.matrix(), r, &mut row).expect("row");
            check_bits(
                &format!("{fmt:?} row {r}"),
                &row,
                &reference[r * K..(r + 1) * K],
            )
            .unwrap();
        }
    }
}

#[test]
fn matches_f64_reference_every_format() {
    let mut rng = Rng(2);
    let pool = Pool::new(2);
    for fmt in all_formats() {
        for &(rows, n) in &[(37usize, 1usize), (19, 9), (8, 64)] {
            let w = Owned::random(fmt, rows, K, &mut rng);
            let x = rng.vec(n * K);
            let y = run(&w, &x, n, &pool);
            let (yr, ar) = reference_matmul(&w.reference_weights(), rows, K, &x, n);
            check_close(&y, &yr, &ar, tolerance(K))
                .unwrap_or_else(|e| panic!("{fmt:?} rows={rows} n={n}: {e}"));
        }
    }
}

#[test]
fn dense_odd_column_counts() {
    let mut rng = Rng(3);
    let pool = Pool::new(2);
    for &cols in &[1usize, 7, 15, 16, 17, 33, 100, 577] {
        for ty in [FloatType::F32, FloatType::F16, FloatType::BF16] {
            let w = Owned::random(Fmt::Dense(ty), 11, cols, &mut rng);
            let x = rng.vec(13 * cols);
            let y = run(&w, &x, 13, &pool);
            let (yr, ar) = reference_matmul(&w.reference_weights(), 11, cols, &x, 13);
            check_close(&y, &yr, &ar, tolerance(cols))
                .unwrap_or_else(|e| panic!("{ty:?} cols={cols}: {e}"));
            check_rows_invariant(&w, &x, 13, &[1, 2, 5, 13], &pool).unwrap();
        }
    }
}

/// Each row of an n-row call (over a window of `x` starting at several offsets, so a row
/// sits among different neighbours) must equal that row computed alone, bit for bit.
fn check_rows_invariant(
    w: &Owned,
    x: &[f32],
    total: usize,
    ns: &[usize],
    pool: &Pool,
) -> Result<(), String> {
    let k = w.cols;
    let solo: Vec<Vec<f32>> = (0..total)
        .map(|i| run(w, &x[i * k..(i + 1) * k], 1, pool))
        .collect();
    for &n in ns {
        for off in [0, (total - n) / 2, total - n] {
            let y = run(w, &x[off * k..(off + n) * k], n, pool);
            for i in 0..n {
                check_bits(
                    &format!("n={n} off={off} row {i}"),
                    &y[i * w.rows..(i + 1) * w.rows],
                    &solo[off + i],
                )?;
            }
        }
    }
    Ok(())
}

fn batch_sizes() -> Vec<usize> {
    let mut ns: Vec<usize> = (1..=64).collect();
    ns.extend([67, 100]);
    ns
}

#[test]
fn row_invariance_every_format() {
    let mut rng = Rng(4);
    let pool = Pool::new(2);
    for fmt in all_formats() {
        let w = Owned::random(fmt, 23, K, &mut rng);
        let x = rng.vec(100 * K);
        check_rows_invariant(&w, &x, 100, &batch_sizes(), &pool)
            .unwrap_or_else(|e| panic!("{fmt:?}: {e}"));
    }
}

#[test]
fn thread_counts_and_levels_agree_bit_for_bit() {
    let mut rng = Rng(5);
    let pools = [Pool::new(1), Pool::new(2), Pool::new(3)];
    for fmt in all_formats() {
        let w = Owned::random(fmt, 45, K, &mut rng);
        let x = rng.vec(20 * K);
        let base = run(&w, &x, 20, &pools[0]);
        for pool in &pools[1..] {
            check_bits(
                &format!("{fmt:?} threads={}", pool.threads()),
                &run(&w, &x, 20, pool),
                &base,
            )
            .unwrap();
        }
        for level in SimdLevel::all().into_iter().filter(|l| l.is_supported()) {
            let mut y = vec![0f32; 20 * w.rows];
            matmul_with_level(level, &w.matrix(), &x, 20, &mut y, &pools[1]).expect("matmul");
            check_bits(&format!("{fmt:?} level={level:?}"), &y, &base).unwrap();
        }
    }
}

#[test]
fn default_model_shapes() {
    use tf_formats::gguf::GgmlType;
    let mut rng = Rng(6);
    let pool = Pool::new(2);
    let shapes = [
        (GgmlType::Q4_1, 576, 576),
        (GgmlType::Q4_1, 192, 576),
        (GgmlType::Q4_1, 1536, 576),
        (GgmlType::Q4_1, 576, 1536),
        (GgmlType::Q8_0, 49152, 576),
    ];
    for (ty, rows, cols) in shapes {
        let w = Owned::random(Fmt::Gguf(ty), rows, cols, &mut rng);
        let n = 5;
        let x = rng.vec(n * cols);
        let y = run(&w, &x, n, &pool);
        let wr = w.reference_weights();
        let (yr, ar) = reference_matmul(&wr, rows, cols, &x, n);
        check_close(&y, &yr, &ar, tolerance(cols))
            .unwrap_or_else(|e| panic!("{ty:?} {rows}x{cols}: {e}"));
        for i in [0, 3] {
            check_bits(
                "model shape solo",
                &y[i * rows..(i + 1) * rows],
                &run(&w, &x[i * cols..(i + 1) * cols], 1, &pool),
            )
            .unwrap();
        }
    }
}

#[test]
fn bad_shapes_are_errors_not_panics() {
    let mut rng = Rng(7);
    let w = Owned::random(Fmt::Gguf(tf_formats::gguf::GgmlType::Q4_1), 4, 64, &mut rng);
    let pool = Pool::new(1);
    let mut y = vec![0f32; 8];
    assert!(matmul(&w.matrix(), &[0.0; 63], 1, &mut y[..4], &pool).is_err());
    assert!(matmul(&w.matrix(), &[0.0; 64], 1, &mut y, &pool).is_err());
    let mut row = vec![0f32; 64];
    assert!(embedding_row(&w.matrix(), 4, &mut row).is_err());
    let short = tf_kernels::matmul::PackedMatrix::gguf(
        tf_formats::gguf::GgmlType::Q4_1,
        4,
        64,
        &w.bytes[1..],
    );
    assert!(short.is_err());
    let ragged = tf_kernels::matmul::PackedMatrix::gguf(
        tf_formats::gguf::GgmlType::Q4_1,
        4,
        48,
        &w.bytes[..4 * 30],
    );
    assert!(ragged.is_err());
}
