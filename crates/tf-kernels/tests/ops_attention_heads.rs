//! `attend_heads`: a row split by query heads (as a forward spreads one decode row over
//! threads) equals the whole-row `attend`, bit for bit, for every split point.

use tf_kernels::contract::Rng;
use tf_kernels::ops::{attend, attend_heads, AttnParams, AttnScratch, LayerKv};

fn params(window: Option<usize>) -> AttnParams {
    AttnParams {
        n_heads: 9,
        n_kv_heads: 3,
        head_dim: 64,
        scale: 0.125,
        window,
        softcap: None,
    }
}

fn cache(rng: &mut Rng, len: usize) -> LayerKv {
    let mut kv = LayerKv::new(3, 64).unwrap();
    for _ in 0..len {
        kv.append(&rng.vec_normal(192, 1.0), &rng.vec_normal(192, 1.0))
            .unwrap();
    }
    kv
}

#[test]
fn every_head_split_equals_the_whole_row() {
    let mut rng = Rng::new(7);
    let mut s = AttnScratch::new();
    for (len, window) in [(1, None), (37, None), (300, None), (300, Some(16))] {
        let kv = cache(&mut rng, len);
        let p = params(window);
        let q = rng.vec_normal(9 * 64, 1.0);
        let pos = len - 1;
        let mut whole = vec![0f32; 9 * 64];
        attend(&q, &kv, pos, &p, &mut whole, &mut s).unwrap();
        for cut in 0..=9 {
            let mut split = vec![f32::NAN; 9 * 64];
            let (a, b) = split.split_at_mut(cut * 64);
            attend_heads(&q, &kv, pos, &p, 0..cut, a, &mut s).unwrap();
            attend_heads(&q, &kv, pos, &p, cut..9, b, &mut s).unwrap();
            assert!(
                split
                    .iter()
                    .zip(&whole)
                    .all(|(x, y)| x.to_bits() == y.to_bits()),
                "len {len} cut {cut}"
            );
        }
        // Planted control: the same comparison sees another KV group's head as different.
        let mut shifted = vec![0f32; 64];
        attend_heads(&q, &kv, pos, &p, 3..4, &mut shifted, &mut s).unwrap();
        assert!(shifted
            .iter()
            .zip(&whole[..64])
            .any(|(x, y)| x.to_bits() != y.to_bits()));
    }
}

#[test]
fn bad_head_ranges_are_refused() {
    let mut rng = Rng::new(8);
    let kv = cache(&mut rng, 4);
    let q = rng.vec_normal(9 * 64, 1.0);
    let mut s = AttnScratch::new();
    let mut out = vec![0f32; 64 * 2];
    assert!(attend_heads(&q, &kv, 3, &params(None), 8..10, &mut out, &mut s).is_err());
    assert!(attend_heads(&q, &kv, 3, &params(None), 0..1, &mut out, &mut s).is_err());
}
