//! Attention over per-stream KV caches: rows are (stream, position) pairs from streams with
//! different cache lengths; a row's output must not depend on which rows shared the call.

use tf_kernels::contract::{
    assert_catches, assert_contract, CheckConfig, Failure, Rng, RowOp, Tolerance,
};
use tf_kernels::ops::simd::portable;
use tf_kernels::ops::{attend, attend_rows, AttnParams, AttnRow, AttnScratch, KvCache, LayerKv};

/// One query row: which stream, at which absolute position, and the query.
#[derive(Clone, Debug)]
struct Row {
    stream: usize,
    pos: usize,
    q: Vec<f32>,
}

/// f64 reference: causal (and windowed) softmax attention with optional softcap.
fn reference(p: &AttnParams, cache: &LayerKv, row: &Row, out: &mut [f64]) {
    let hd = p.head_dim;
    let group = p.n_heads / p.n_kv_heads;
    let lo = match p.window {
        Some(w) => (row.pos + 1).saturating_sub(w),
        None => 0,
    };
    for h in 0..p.n_heads {
        let q = &row.q[h * hd..(h + 1) * hd];
        let kvh = h / group;
        let scores: Vec<f64> = (lo..=row.pos)
            .map(|j| {
                let k = cache.key(j, kvh).unwrap();
                let mut s = q
                    .iter()
                    .zip(k)
                    .map(|(&a, &b)| a as f64 * b as f64)
                    .sum::<f64>()
                    * p.scale as f64;
                if let Some(c) = p.softcap {
                    s = c as f64 * (s / c as f64).tanh();
                }
                s
            })
            .collect();
        let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
        let l: f64 = e.iter().sum();
        for d in 0..hd {
            let acc: f64 = (lo..=row.pos)
                .zip(&e)
                .map(|(j, &pj)| pj * cache.value(j, kvh).unwrap()[d] as f64)
                .sum();
            out[h * hd + d] = acc / l;
        }
    }
}

/// Streams with different cache lengths (1 .. ~300 keys), filled with seeded random K and V.
fn make_streams(p: &AttnParams, seed: u64) -> Vec<LayerKv> {
    let mut rng = Rng::new(seed);
    let w = p.n_kv_heads * p.head_dim;
    [1usize, 2, 17, 64, 130, 301]
        .iter()
        .map(|&len| {
            let mut kv = LayerKv::new(p.n_kv_heads, p.head_dim).unwrap();
            // Append in uneven chunks to exercise growth.
            let mut done = 0;
            while done < len {
                let n = (1 + rng.below(40)).min(len - done);
                let k = rng.vec_normal(n * w, 1.0);
                let v = rng.vec_normal(n * w, 1.0);
                kv.append(&k, &v).unwrap();
                done += n;
            }
            kv
        })
        .collect()
}

fn run_rows(p: &AttnParams, streams: &[LayerKv], rows: &[Row], out: &mut [f32]) {
    let q: Vec<f32> = rows.iter().flat_map(|r| r.q.clone()).collect();
    let batch: Vec<AttnRow> = rows
        .iter()
        .map(|r| AttnRow {
            cache: &streams[r.stream],
            q_pos: r.pos,
        })
        .collect();
    // One scratch reused across the call: stale contents must not leak between rows.
    let mut scratch = AttnScratch::new();
    attend_rows(&q, &batch, p, out, &mut scratch).unwrap();
}

fn contract_for(name: &str, p: AttnParams, cfg: &CheckConfig) {
    let streams = make_streams(&p, 77);
    let w = p.n_heads * p.head_dim;
    let gen = |r: &mut Rng, _i: usize| {
        let stream = r.below(streams.len());
        let pos = r.below(streams[stream].len());
        Row {
            stream,
            pos,
            q: r.vec_normal(w, 1.0),
        }
    };
    let reference = |row: &Row, out: &mut [f64]| reference(&p, &streams[row.stream], row, out);
    let op = RowOp {
        name,
        out_width: w,
        tolerance: Tolerance::new(2e-6, 1e-5),
        gen_row: &gen,
        reference: &reference,
    };
    let run = |rows: &[Row], out: &mut [f32]| run_rows(&p, &streams, rows, out);
    let rep = assert_contract(&op, &run, cfg);
    eprintln!("{name}: max abs err {:e}", rep.max_abs_err);
}

fn smollm(window: Option<usize>, softcap: Option<f32>) -> AttnParams {
    AttnParams {
        n_heads: 9,
        n_kv_heads: 3,
        head_dim: 64,
        scale: 0.125,
        window,
        softcap,
    }
}

#[test]
fn attention_contract_default_model_shape() {
    contract_for(
        "attention smollm2 9q/3kv x 64",
        smollm(None, None),
        &CheckConfig::default(),
    );
}

#[test]
fn attention_contract_window_softcap_and_odd_shapes() {
    let cfg = CheckConfig::quick();
    contract_for("attention window 16", smollm(Some(16), None), &cfg);
    contract_for("attention window 1", smollm(Some(1), None), &cfg);
    contract_for(
        "attention softcap 50",
        AttnParams {
            scale: 0.3,
            ..smollm(None, Some(50.0))
        },
        &cfg,
    );
    let odd = AttnParams {
        n_heads: 4,
        n_kv_heads: 4,
        head_dim: 37,
        scale: 0.2,
        window: None,
        softcap: None,
    };
    contract_for("attention MHA head_dim 37", odd, &cfg);
    let mqa = AttnParams {
        n_heads: 8,
        n_kv_heads: 1,
        head_dim: 128,
        scale: 0.09,
        window: Some(100),
        softcap: None,
    };
    contract_for("attention MQA head_dim 128", mqa, &cfg);
}

#[test]
fn attention_ignores_keys_after_the_query_and_other_streams() {
    // The same stream prefix inside a longer cache gives the same bits (chunked prefill appends a
    // whole chunk before attending; drafts roll back with truncate).
    let p = smollm(None, None);
    let streams = make_streams(&p, 5);
    let long = &streams[5];
    let q = Rng::new(1).vec_normal(9 * 64, 1.0);
    let mut a = vec![0.0; 9 * 64];
    let mut b = vec![0.0; 9 * 64];
    let mut scratch = AttnScratch::new();
    attend(&q, long, 40, &p, &mut a, &mut scratch).unwrap();
    let mut short = long.clone();
    short.truncate(41);
    assert_eq!(short.len(), 41);
    attend(&q, &short, 40, &p, &mut b, &mut scratch).unwrap();
    assert_eq!(a, b);
    // Control: a different position does change the output.
    attend(&q, long, 41, &p, &mut b, &mut scratch).unwrap();
    assert_ne!(a, b);
    // Beyond the cache is a named error.
    assert!(attend(&q, &short, 41, &p, &mut b, &mut scratch).is_err());
}

/// A planted bug: when several rows share a call, the probability sum is taken sequentially
/// instead of in the 16-lane order (a batch-size-dependent reduction).
fn attend_n_dependent(p: &AttnParams, cache: &LayerKv, row: &Row, batched: bool, out: &mut [f32]) {
    let hd = p.head_dim;
    let group = p.n_heads / p.n_kv_heads;
    for h in 0..p.n_heads {
        let q = &row.q[h * hd..(h + 1) * hd];
        let s: Vec<f32> = (0..=row.pos)
            .map(|j| portable::dot(q, cache.key(j, h / group).unwrap()) * p.scale)
            .collect();
        let m = portable::max(&s);
        let mut e = vec![0.0; s.len()];
        portable::exp_shifted(&s, m, &mut e);
        let l = if batched {
            e.iter().sum()
        } else {
            portable::sum(&e)
        };
        let mut acc = vec![0.0f32; hd];
        for (j, &pj) in e.iter().enumerate() {
            portable::axpy(pj, cache.value(j, h / group).unwrap(), &mut acc);
        }
        for d in 0..hd {
            out[h * hd + d] = acc[d] / l;
        }
    }
}

#[test]
fn attention_planted_controls_are_caught() {
    let p = smollm(None, None);
    let streams = make_streams(&p, 77);
    let w = p.n_heads * p.head_dim;
    let gen = |r: &mut Rng, _i: usize| {
        let stream = 3 + r.below(3); // caches of 64+ keys, so the sum order matters
        let pos = 20 + r.below(streams[stream].len() - 20);
        Row {
            stream,
            pos,
            q: r.vec_normal(w, 1.0),
        }
    };
    let reference = |row: &Row, out: &mut [f64]| reference(&p, &streams[row.stream], row, out);
    let op = RowOp {
        name: "attention control",
        out_width: w,
        tolerance: Tolerance::new(2e-6, 1e-5),
        gen_row: &gen,
        reference: &reference,
    };
    let n_dependent = |rows: &[Row], out: &mut [f32]| {
        for (row, o) in rows.iter().zip(out.chunks_exact_mut(w)) {
            attend_n_dependent(&p, &streams[row.stream], row, rows.len() > 1, o);
        }
    };
    let f = assert_catches(&op, &n_dependent, &CheckConfig::default());
    assert!(matches!(f, Failure::RowVariance { .. }), "{f}");
    // Off by one: the query does not see its own key.
    let off_by_one = |rows: &[Row], out: &mut [f32]| {
        let mut scratch = AttnScratch::new();
        for (row, o) in rows.iter().zip(out.chunks_exact_mut(w)) {
            attend(
                &row.q,
                &streams[row.stream],
                row.pos - 1,
                &p,
                o,
                &mut scratch,
            )
            .unwrap();
        }
    };
    let f = assert_catches(&op, &off_by_one, &CheckConfig::quick());
    assert!(matches!(f, Failure::Accuracy { .. }), "{f}");
}

#[test]
fn kv_cache_append_truncate_grow() {
    let mut c = KvCache::new(2, 3, 4).unwrap();
    let l = c.layer_mut(1).unwrap();
    assert!(l.is_empty());
    l.append(&[1.0; 24], &[2.0; 24]).unwrap();
    assert_eq!(l.len(), 2);
    assert_eq!(l.key(1, 2), Some(&[1.0f32; 4][..]));
    assert_eq!(l.value(2, 0), None);
    assert!(l.append(&[1.0; 5], &[1.0; 5]).is_err());
    assert!(l.append(&[1.0; 12], &[1.0; 24]).is_err());
    l.reserve(100);
    assert!(l.capacity() >= 102);
    c.truncate(1);
    assert_eq!(c.layer(1).unwrap().len(), 1);
    assert_eq!(c.bytes(), 2 * 12 * 4);
    assert!(LayerKv::new(0, 4).is_err());
}

#[test]
fn attention_refuses_bad_params() {
    let kv = make_streams(&smollm(None, None), 1).remove(2);
    let mut out = vec![0.0; 9 * 64];
    let q = vec![0.0; 9 * 64];
    let mut s = AttnScratch::new();
    let bad = |p: AttnParams, out: &mut Vec<f32>, s: &mut AttnScratch| {
        attend(&q, &kv, 3, &p, out, s).is_err()
    };
    assert!(bad(
        AttnParams {
            n_heads: 8,
            ..smollm(None, None)
        },
        &mut out,
        &mut s
    ));
    assert!(bad(smollm(Some(0), None), &mut out, &mut s));
    assert!(bad(smollm(None, Some(-1.0)), &mut out, &mut s));
    assert!(!bad(smollm(None, None), &mut out, &mut s));
}
