//! Planted controls: deliberately broken matmul variants that the contract's checks must
//! catch, showing the checks are able to fail.

mod matmul_support;

use matmul_support::*;
use tf_kernels::matmul::{embedding_row, matmul, FloatType, PackedMatrix, WeightData};
use tf_kernels::pool::Pool;

const K: usize = 512;

/// A broken "matmul" that splits k in two halves (summed separately, then added) when the
/// call has more than 4 rows — an n-dependent reduction order.
fn split_k_when_batched(wf: &[f32], rows: usize, x: &[f32], n: usize, pool: &Pool) -> Vec<f32> {
    let dense = |cols: std::ops::Range<usize>| -> Vec<u8> {
        (0..rows)
            .flat_map(|j| wf[j * K + cols.start..j * K + cols.end].to_vec())
            .flat_map(f32::to_le_bytes)
            .collect()
    };
    let mut y = vec![0f32; n * rows];
    if n <= 4 {
        let b = dense(0..K);
        let w = PackedMatrix::new(
            rows,
            K,
            WeightData::Dense {
                ty: FloatType::F32,
                bytes: &b,
            },
        )
        .unwrap();
        matmul(&w, x, n, &mut y, pool).unwrap();
        return y;
    }
    let h = K / 2;
    let (b0, b1) = (dense(0..h), dense(h..K));
    let w0 = PackedMatrix::new(
        rows,
        h,
        WeightData::Dense {
            ty: FloatType::F32,
            bytes: &b0,
        },
    )
    .unwrap();
    let w1 = PackedMatrix::new(
        rows,
        h,
        WeightData::Dense {
            ty: FloatType::F32,
            bytes: &b1,
        },
    )
    .unwrap();
    let x0: Vec<f32> = (0..n).flat_map(|i| x[i * K..i * K + h].to_vec()).collect();
    let x1: Vec<f32> = (0..n)
        .flat_map(|i| x[i * K + h..(i + 1) * K].to_vec())
        .collect();
    let (mut y0, mut y1) = (vec![0f32; n * rows], vec![0f32; n * rows]);
    matmul(&w0, &x0, n, &mut y0, pool).unwrap();
    matmul(&w1, &x1, n, &mut y1, pool).unwrap();
    for i in 0..n * rows {
        y[i] = y0[i] + y1[i];
    }
    y
}

#[test]
fn planted_split_k_is_caught_by_row_invariance() {
    let mut rng = Rng(11);
    let pool = Pool::new(2);
    let rows = 16;
    let w = Owned::random(Fmt::Dense(FloatType::F32), rows, K, &mut rng);
    let wf = w.reference_weights();
    let x = rng.vec(8 * K);
    let batched = split_k_when_batched(&wf, rows, &x, 8, &pool);
    // Still accurate: the tolerance check alone would not notice.
    let (yr, ar) = reference_matmul(&wf, rows, K, &x, 8);
    check_close(&batched, &yr, &ar, tolerance(K)).expect("split-k is accurate");
    let mut caught = false;
    for i in 0..8 {
        let solo = split_k_when_batched(&wf, rows, &x[i * K..(i + 1) * K], 1, &pool);
        caught |= check_bits("row", &batched[i * rows..(i + 1) * rows], &solo).is_err();
    }
    assert!(
        caught,
        "the row-invariance check missed an n-dependent split of k"
    );
}

#[test]
fn planted_nibble_off_by_one_is_caught_by_tolerance() {
    let mut rng = Rng(12);
    let pool = Pool::new(2);
    let w = Owned::random(Fmt::Gguf(tf_formats::gguf::GgmlType::Q4_1), 9, K, &mut rng);
    // The broken decoder: in each block, element 16 takes element 17's nibble.
    let mut broken = vec![0f32; 9 * K];
    for r in 0..9 {
        embedding_row(&w.matrix(), r, &mut broken[r * K..(r + 1) * K]).unwrap();
        for b in 0..K / 32 {
            broken[r * K + 32 * b + 16] = broken[r * K + 32 * b + 17];
        }
    }
    let bytes: Vec<u8> = broken.iter().flat_map(|v| v.to_le_bytes()).collect();
    let bw = PackedMatrix::new(
        9,
        K,
        WeightData::Dense {
            ty: FloatType::F32,
            bytes: &bytes,
        },
    )
    .unwrap();
    let x = rng.vec(3 * K);
    let mut y = vec![0f32; 27];
    matmul(&bw, &x, 3, &mut y, &pool).unwrap();
    let (yr, ar) = reference_matmul(&w.reference_weights(), 9, K, &x, 3);
    assert!(
        check_close(&y, &yr, &ar, tolerance(K)).is_err(),
        "the tolerance check missed a nibble off-by-one"
    );
    // And the decode check catches the same fault directly.
    assert!(check_bits("decode", &broken, &w.reference_weights()).is_err());
}

#[test]
fn planted_thread_dependent_split_is_caught() {
    // A variant whose reduction splits k by the thread count: 1 thread sums k in one pass,
    // 2 threads as two halves added. The thread-count check must see the difference.
    let mut rng = Rng(13);
    let rows = 16;
    let w = Owned::random(Fmt::Dense(FloatType::F32), rows, K, &mut rng);
    let wf = w.reference_weights();
    let x = rng.vec(6 * K);
    let one = Pool::new(1);
    let two = Pool::new(2);
    let by_threads = |pool: &Pool| {
        split_k_when_batched(&wf, rows, &x, if pool.threads() == 1 { 1 } else { 6 }, pool)
    };
    let a: Vec<f32> = (0..6)
        .flat_map(|i| split_k_when_batched(&wf, rows, &x[i * K..(i + 1) * K], 1, &one))
        .collect();
    let b = by_threads(&two);
    assert!(
        check_bits("threads", &b, &a).is_err(),
        "the thread check missed a thread-dependent split"
    );
}
