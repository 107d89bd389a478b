//! Kernel contract for MoE routing (sigmoid + correction bias, grouped top-k, normalisation and
//! scaling) and the combine, with planted controls and the tie / dropped-group semantics.

use tf_kernels::contract::{
    assert_catches, assert_contract, CheckConfig, Failure, Rng, RowOp, Tolerance,
};
use tf_kernels::ops::{combine, route, DroppedGroups, Pick, RouteParams, RouteScratch};

/// f64 reference routing; out = [picked ids as f64 ; weights].
fn reference_route(logits: &[f32], corr: &[f32], p: &RouteParams, out: &mut [f64]) {
    let n = p.n_experts;
    let probs: Vec<f64> = logits
        .iter()
        .map(|&x| 1.0 / (1.0 + (-(x as f64)).exp()))
        .collect();
    let mut s: Vec<f64> = probs
        .iter()
        .zip(corr)
        .map(|(&q, &c)| q + c as f64)
        .collect();
    if p.n_group > 1 {
        let per = n / p.n_group;
        let mut gs: Vec<(f64, usize)> = s
            .chunks(per)
            .enumerate()
            .map(|(g, v)| {
                let mut v = v.to_vec();
                v.sort_by(|a, b| b.total_cmp(a));
                (v[0] + v[1], g)
            })
            .collect();
        gs.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        let fill = match p.dropped {
            DroppedGroups::Zero => 0.0,
            DroppedGroups::NegInf => f64::NEG_INFINITY,
        };
        for &(_, g) in &gs[p.topk_group..] {
            s[g * per..(g + 1) * per].fill(fill);
        }
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| s[b].total_cmp(&s[a]).then(a.cmp(&b)));
    let k = p.top_k;
    let mut w: Vec<f64> = order[..k].iter().map(|&e| probs[e]).collect();
    if p.norm_topk_prob && k > 1 {
        let sum: f64 = w.iter().sum::<f64>() + 1e-20;
        w.iter_mut().for_each(|v| *v /= sum);
    }
    for j in 0..k {
        out[j] = order[j] as f64;
        out[k + j] = w[j] * p.scaling as f64;
    }
}

fn run_route(p: &RouteParams, corr: &[f32], rows: &[Vec<f32>], out: &mut [f32]) {
    let k = p.top_k;
    let mut scratch = RouteScratch::default();
    let mut picks = vec![
        Pick {
            expert: 0,
            weight: 0.0
        };
        k
    ];
    for (row, o) in rows.iter().zip(out.chunks_exact_mut(2 * k)) {
        route(row, corr, p, &mut scratch, &mut picks).unwrap();
        for (j, pk) in picks.iter().enumerate() {
            o[j] = pk.expert as f32;
            o[k + j] = pk.weight;
        }
    }
}

const TOL: Tolerance = Tolerance::new(1e-6, 1e-6);

fn params(n: usize, k: usize, groups: usize, keep: usize, scaling: f32, norm: bool) -> RouteParams {
    RouteParams {
        n_experts: n,
        top_k: k,
        n_group: groups,
        topk_group: keep,
        scaling,
        norm_topk_prob: norm,
        dropped: DroppedGroups::Zero,
    }
}

fn contract(p: RouteParams, seed: u64) {
    let mut r = Rng::new(seed);
    let corr = r.vec_normal(p.n_experts, 0.05);
    let gen = |r: &mut Rng, _i: usize| r.vec_normal(p.n_experts, 2.0);
    let c2 = corr.clone();
    let reference = move |row: &Vec<f32>, out: &mut [f64]| reference_route(row, &c2, &p, out);
    let op = RowOp {
        name: "route",
        out_width: 2 * p.top_k,
        tolerance: TOL,
        gen_row: &gen,
        reference: &reference,
    };
    let run = |rows: &[Vec<f32>], out: &mut [f32]| run_route(&p, &corr, rows, out);
    assert_contract(&op, &run, &CheckConfig::default());
}

#[test]
fn route_contract_on_fixture_and_bolt_shapes() {
    // The fixtures: grouped (12 experts, 4 groups keep 2, top-3, scaling 2.5, renormalised),
    // plain (8, top-2, no renormalisation), Puzzle layers (6/top-2, 10/top-3, 4/top-1).
    contract(params(12, 3, 4, 2, 2.5, true), 1);
    contract(params(8, 2, 1, 1, 1.0, false), 2);
    contract(params(6, 2, 1, 1, 1.5, true), 3);
    contract(params(10, 3, 1, 1, 1.5, true), 4);
    contract(params(4, 1, 1, 1, 1.5, true), 5);
    // Bolt-like layers: 240..496 experts, top-9; a DeepSeek-like grouped 256 / 8 groups keep 4.
    contract(params(240, 9, 1, 1, 2.5, true), 6);
    contract(params(496, 9, 1, 1, 2.5, true), 7);
    contract(params(256, 8, 8, 4, 2.5, true), 8);
}

#[test]
fn planted_routing_controls_are_caught() {
    let p = params(12, 3, 4, 2, 2.5, true);
    let mut r = Rng::new(11);
    let corr = r.vec_normal(p.n_experts, 0.3);
    let gen = |r: &mut Rng, _i: usize| r.vec_normal(p.n_experts, 2.0);
    let c2 = corr.clone();
    let reference = move |row: &Vec<f32>, out: &mut [f64]| reference_route(row, &c2, &p, out);
    let op = RowOp {
        name: "route",
        out_width: 2 * p.top_k,
        tolerance: TOL,
        gen_row: &gen,
        reference: &reference,
    };
    let cfg = CheckConfig::quick();
    // The correction bias ignored (a gate bias dropped).
    let zeros = vec![0.0; p.n_experts];
    let f = assert_catches(
        &op,
        &|rows: &[Vec<f32>], out: &mut [f32]| run_route(&p, &zeros, rows, out),
        &cfg,
    );
    assert!(matches!(f, Failure::Accuracy { .. }), "{f:?}");
    // No grouping (all groups kept).
    let ungrouped = RouteParams {
        n_group: 1,
        topk_group: 1,
        ..p
    };
    let f = assert_catches(
        &op,
        &|rows: &[Vec<f32>], out: &mut [f32]| run_route(&ungrouped, &corr, rows, out),
        &cfg,
    );
    assert!(matches!(f, Failure::Accuracy { .. }), "{f:?}");
    // Weights not renormalised, or not scaled.
    let unnormed = RouteParams {
        norm_topk_prob: false,
        ..p
    };
    let f = assert_catches(
        &op,
        &|rows: &[Vec<f32>], out: &mut [f32]| run_route(&unnormed, &corr, rows, out),
        &cfg,
    );
    assert!(matches!(f, Failure::Accuracy { .. }), "{f:?}");
    let unscaled = RouteParams { scaling: 1.0, ..p };
    let f = assert_catches(
        &op,
        &|rows: &[Vec<f32>], out: &mut [f32]| run_route(&unscaled, &corr, rows, out),
        &cfg,
    );
    assert!(matches!(f, Failure::Accuracy { .. }), "{f:?}");
    // Batch-dependent output: the weights of later rows perturbed when N > 1.
    let varying = |rows: &[Vec<f32>], out: &mut [f32]| {
        run_route(&p, &corr, rows, out);
        if rows.len() > 2 {
            let w = 2 * p.top_k;
            out[2 * w + p.top_k] = f32::from_bits(out[2 * w + p.top_k].to_bits() ^ 1);
        }
    };
    let f = assert_catches(&op, &varying, &cfg);
    assert!(matches!(f, Failure::RowVariance { .. }), "{f:?}");
}

fn picks_of(logits: &[f32], corr: &[f32], p: &RouteParams) -> Vec<Pick> {
    let mut picks = vec![
        Pick {
            expert: 0,
            weight: 0.0
        };
        p.top_k
    ];
    route(logits, corr, p, &mut RouteScratch::default(), &mut picks).unwrap();
    picks
}

#[test]
fn ties_break_by_expert_id() {
    let p = params(8, 3, 1, 1, 1.0, false);
    let picks = picks_of(&[0.5; 8], &[0.0; 8], &p);
    let ids: Vec<u32> = picks.iter().map(|p| p.expert).collect();
    assert_eq!(ids, [0, 1, 2]);
    // Ties among the best, after a clear winner: 5 first, then the lowest tied ids.
    let mut l = [0.5f32; 8];
    l[5] = 3.0;
    let ids: Vec<u32> = picks_of(&l, &[0.0; 8], &p)
        .iter()
        .map(|p| p.expert)
        .collect();
    assert_eq!(ids, [5, 0, 1]);
    // Tied groups: the lower group id is kept.
    let g = params(8, 2, 4, 1, 1.0, false);
    let ids: Vec<u32> = picks_of(&[0.5; 8], &[0.0; 8], &g)
        .iter()
        .map(|p| p.expert)
        .collect();
    assert_eq!(ids, [0, 1]);
}

#[test]
fn dropped_groups_zero_vs_neg_inf() {
    // Group 0 (experts 0, 1) is the best group but its experts' biased scores are negative;
    // group 1 (experts 2, 3) is dropped. With mlx-lm's 0.0 fill a dropped expert (score 0)
    // outranks the kept negative ones; with transformers' -inf it never can.
    let logits = [0.0f32, 0.0, -8.0, -9.0];
    let corr = [-0.6f32, -0.7, -0.9, -0.9];
    let mut p = params(4, 2, 2, 1, 1.0, false);
    let zero: Vec<u32> = picks_of(&logits, &corr, &p)
        .iter()
        .map(|p| p.expert)
        .collect();
    assert_eq!(
        zero,
        [2, 3],
        "0.0 fill: dropped experts (score 0) beat kept ones (< 0)"
    );
    p.dropped = DroppedGroups::NegInf;
    let neg: Vec<u32> = picks_of(&logits, &corr, &p)
        .iter()
        .map(|p| p.expert)
        .collect();
    assert_eq!(neg, [0, 1]);
}

#[test]
fn weights_use_unbiased_probabilities() {
    // Expert 1 is picked only thanks to its bias; its weight is its plain sigmoid.
    let p = params(3, 1, 1, 1, 2.0, true);
    let picks = picks_of(&[1.0, 0.0, 0.5], &[0.0, 0.9, 0.0], &p);
    assert_eq!(picks[0].expert, 1);
    assert_eq!(
        picks[0].weight,
        0.5 * 2.0,
        "top_k 1: no renormalisation, sigmoid(0) * 2"
    );
}

#[test]
fn combine_adds_in_pick_order() {
    let picks = [
        Pick {
            expert: 3,
            weight: 0.5,
        },
        Pick {
            expert: 1,
            weight: 0.25,
        },
        Pick {
            expert: 0,
            weight: 2.0,
        },
    ];
    let outs = [1.0f32, 1e8, 3.0, -1e8, 1.0, 7.0];
    let mut out = [0f32; 2];
    combine(&picks, &outs, &mut out).unwrap();
    let want0 = ((0.5f32 * 1.0) + 0.25 * 3.0) + 2.0 * 1.0;
    let want1 = ((0.5f32 * 1e8) + 0.25 * -1e8) + 2.0 * 7.0;
    assert_eq!(out, [want0, want1]);
    assert!(combine(&picks, &outs[..5], &mut out).is_err());
}

#[test]
fn bad_routing_parameters_are_errors() {
    let corr = [0.0f32; 8];
    let mut picks = vec![
        Pick {
            expert: 0,
            weight: 0.0
        };
        9
    ];
    let p = params(8, 9, 1, 1, 1.0, true);
    assert!(route(
        &[0.0; 8],
        &corr,
        &p,
        &mut RouteScratch::default(),
        &mut picks
    )
    .is_err());
    let p = params(8, 2, 3, 1, 1.0, true);
    assert!(route(
        &[0.0; 8],
        &corr,
        &p,
        &mut RouteScratch::default(),
        &mut picks[..2]
    )
    .is_err());
    let p = params(8, 5, 4, 2, 1.0, true);
    assert!(route(
        &[0.0; 8],
        &corr,
        &p,
        &mut RouteScratch::default(),
        &mut picks[..5]
    )
    .is_err());
}
