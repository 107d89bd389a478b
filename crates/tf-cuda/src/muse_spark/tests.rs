//! Host tests of the Muse Spark loader (no GPU needed).

use super::weights::{interleave_order, permute_rows, residual_coefficients, with_buffers};
use tf_kernels::contract::Rng;
use tf_kernels::matmul::{matmul, FloatType, PackedMatrix, WeightData};
use tf_kernels::pool::Pool;

/// The CPU forward's permutation of a q/k output row: element `t * d/2 + i` of each head moves
/// to `2i + t`.
fn interleave_heads(x: &mut [f32], head_dim: usize) {
    let half = head_dim / 2;
    for head in x.chunks_exact_mut(head_dim) {
        let old = head.to_vec();
        for i in 0..half {
            head[2 * i] = old[i];
            head[2 * i + 1] = old[half + i];
        }
    }
}

#[test]
fn permuted_weight_rows_give_the_cpus_interleaved_outputs_bit_for_bit() {
    let (rows, cols, hd) = (3 * 8, 40, 8);
    let mut rng = Rng::new(7);
    let w: Vec<u8> = (0..rows * cols)
        .flat_map(|_| rng.uniform(-0.5, 0.5).to_le_bytes())
        .collect();
    let m = PackedMatrix::new(
        rows,
        cols,
        WeightData::Dense {
            ty: FloatType::F32,
            bytes: &w,
        },
    )
    .unwrap();
    let x = rng.vec_uniform(2 * cols, -1.0, 1.0);
    let pool = Pool::new(1);
    let mut want = vec![0f32; 2 * rows];
    matmul(&m, &x, 2, &mut want, &pool).unwrap();
    for row in want.chunks_exact_mut(rows) {
        interleave_heads(row, hd);
    }
    let bufs = permute_rows(&m, &interleave_order(rows, hd));
    let p = with_buffers(&m, &bufs).unwrap();
    let mut got = vec![0f32; 2 * rows];
    matmul(&p, &x, 2, &mut got, &pool).unwrap();
    assert!(got
        .iter()
        .zip(&want)
        .all(|(a, b)| a.to_bits() == b.to_bits()));
    // Planted control: the unpermuted matrix does not give the interleaved order.
    let mut plain = vec![0f32; 2 * rows];
    matmul(&m, &x, 2, &mut plain, &pool).unwrap();
    assert!(plain
        .iter()
        .zip(&want)
        .any(|(a, b)| a.to_bits() != b.to_bits()));
}

#[test]
fn interleave_order_is_a_permutation_within_each_head() {
    let order = interleave_order(16, 8);
    assert_eq!(&order[..8], &[0, 4, 1, 5, 2, 6, 3, 7]);
    assert_eq!(&order[8..], &[8, 12, 9, 13, 10, 14, 11, 15]);
}

#[test]
fn residual_coefficients_follow_the_formula() {
    let (a, b) = residual_coefficients(&[0.0, 3.0, -30.0], 0.3);
    // g = 0: beta = 1/2, alpha = sqrt(1/2 * 3/2).
    assert_eq!(b[0], 0.5);
    assert_eq!(a[0], (0.5f32 * 1.5).sqrt());
    // Large |g|: the 1e-3 floor holds alpha when sigmoid(-w) vanishes.
    assert!(b[1] > 0.9999 && a[1] == 1e-3f32.sqrt());
    assert!(b[2] < 1e-30 && a[2] > 0.0);
}
