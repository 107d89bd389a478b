//! RoPE: frequency tables against transformers' formulas (computed here in f64), both pairings,
//! partial rotary, and the kernel contract over rows at many absolute positions.

use std::f64::consts::PI;
use tf_kernels::contract::{
    assert_catches, assert_contract, CheckConfig, Failure, Rng, RowOp, Tolerance,
};
use tf_kernels::ops::{Rope, RopeConfig, RopePairing, RopeScaling};

/// transformers' frequency tables in f64: (inv_freq, attention factor).
fn reference_inv_freq(cfg: &RopeConfig) -> (Vec<f64>, f64) {
    let dim = cfg.rotary_dim;
    let base = cfg.theta;
    let pos_freq: Vec<f64> = (0..dim / 2)
        .map(|i| base.powf(2.0 * i as f64 / dim as f64))
        .collect();
    let default: Vec<f64> = pos_freq.iter().map(|p| 1.0 / p).collect();
    match &cfg.scaling {
        RopeScaling::None => (default, 1.0),
        RopeScaling::Linear { factor } => (default.iter().map(|v| v / factor).collect(), 1.0),
        RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings,
        } => {
            let old = *original_max_position_embeddings as f64;
            let (low_wl, high_wl) = (old / low_freq_factor, old / high_freq_factor);
            let v = default
                .iter()
                .map(|&f| {
                    let wl = 2.0 * PI / f;
                    if wl < high_wl {
                        f
                    } else if wl > low_wl {
                        f / factor
                    } else {
                        let s = (old / wl - low_freq_factor) / (high_freq_factor - low_freq_factor);
                        (1.0 - s) * f / factor + s * f
                    }
                })
                .collect();
            (v, 1.0)
        }
        RopeScaling::Yarn {
            factor,
            beta_fast,
            beta_slow,
            mscale,
            mscale_all_dim,
            attention_factor,
            original_max_position_embeddings,
            truncate,
        } => {
            let omax = *original_max_position_embeddings as f64;
            let corr = |rot: f64| (dim as f64 * (omax / (rot * 2.0 * PI)).ln()) / (2.0 * base.ln());
            let (mut lo, mut hi) = (corr(*beta_fast), corr(*beta_slow));
            if *truncate {
                lo = lo.floor();
                hi = hi.ceil();
            }
            let (lo, mut hi) = (lo.max(0.0), hi.min(dim as f64 - 1.0));
            if lo == hi {
                hi += 0.001;
            }
            let v = (0..dim / 2)
                .map(|i| {
                    let ramp = ((i as f64 - lo) / (hi - lo)).clamp(0.0, 1.0);
                    let extra = 1.0 - ramp;
                    let p = pos_freq[i];
                    (1.0 / (factor * p)) * (1.0 - extra) + (1.0 / p) * extra
                })
                .collect();
            let m = |s: f64, k: f64| {
                if s <= 1.0 {
                    1.0
                } else {
                    0.1 * k * s.ln() + 1.0
                }
            };
            let att = attention_factor.unwrap_or(match (mscale, mscale_all_dim) {
                (Some(a), Some(b)) if *a != 0.0 && *b != 0.0 => m(*factor, *a) / m(*factor, *b),
                _ => m(*factor, 1.0),
            });
            (v, att)
        }
    }
}

/// Rotates one head row in f64 with the reference table; angle as transformers forms it (f32).
fn reference_rotate(cfg: &RopeConfig, inv: &[f64], att: f64, x: &[f32], pos: usize) -> Vec<f64> {
    let hd = cfg.head_dim;
    let half = cfg.rotary_dim / 2;
    let mut out: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    for h in 0..x.len() / hd {
        let o = &mut out[h * hd..(h + 1) * hd];
        for (i, &f) in inv.iter().enumerate() {
            let angle = (pos as f32 * f as f32) as f64;
            let (c, s) = (angle.cos() * att, angle.sin() * att);
            let (ia, ib) = match cfg.pairing {
                RopePairing::Interleaved => (2 * i, 2 * i + 1),
                RopePairing::Half => (i, i + half),
            };
            let (a, b) = (o[ia], o[ib]);
            o[ia] = a * c - b * s;
            o[ib] = b * c + a * s;
        }
    }
    out
}

fn smollm() -> RopeConfig {
    RopeConfig {
        head_dim: 64,
        rotary_dim: 64,
        theta: 100_000.0,
        pairing: RopePairing::Half,
        scaling: RopeScaling::None,
    }
}

fn llama3() -> RopeConfig {
    RopeConfig {
        head_dim: 128,
        rotary_dim: 128,
        theta: 500_000.0,
        pairing: RopePairing::Half,
        scaling: RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192,
        },
    }
}

fn yarn() -> RopeConfig {
    RopeConfig {
        head_dim: 128,
        rotary_dim: 128,
        theta: 1_000_000.0,
        pairing: RopePairing::Half,
        scaling: RopeScaling::Yarn {
            factor: 4.0,
            beta_fast: 32.0,
            beta_slow: 1.0,
            mscale: None,
            mscale_all_dim: None,
            attention_factor: None,
            original_max_position_embeddings: 32768,
            truncate: true,
        },
    }
}

fn all_configs() -> Vec<(&'static str, RopeConfig)> {
    let mut partial_interleaved = smollm();
    partial_interleaved.rotary_dim = 32;
    partial_interleaved.pairing = RopePairing::Interleaved;
    let mut partial_half = smollm();
    partial_half.rotary_dim = 16;
    let mut yarn_ds = yarn();
    yarn_ds.head_dim = 64;
    yarn_ds.rotary_dim = 64;
    yarn_ds.theta = 10_000.0;
    yarn_ds.scaling = RopeScaling::Yarn {
        factor: 40.0,
        beta_fast: 32.0,
        beta_slow: 1.0,
        mscale: Some(0.707),
        mscale_all_dim: Some(1.0),
        attention_factor: None,
        original_max_position_embeddings: 4096,
        truncate: false,
    };
    let mut linear = smollm();
    linear.scaling = RopeScaling::Linear { factor: 2.0 };
    let mut interleaved = smollm();
    interleaved.pairing = RopePairing::Interleaved;
    vec![
        ("default smollm2", smollm()),
        ("default interleaved", interleaved),
        ("linear", linear),
        ("llama3", llama3()),
        ("yarn", yarn()),
        ("yarn deepseek-style mscale", yarn_ds),
        ("partial interleaved 32/64", partial_interleaved),
        ("partial half 16/64", partial_half),
    ]
}

#[test]
fn inv_freq_tables_match_transformers_formulas() {
    for (name, cfg) in all_configs() {
        let rope = Rope::new(cfg.clone()).unwrap();
        let (want, att) = reference_inv_freq(&cfg);
        assert_eq!(rope.inv_freq().len(), cfg.rotary_dim / 2, "{name}");
        for (i, (&g, &w)) in rope.inv_freq().iter().zip(&want).enumerate() {
            let rel = (g as f64 - w).abs() / w;
            assert!(
                rel < 1e-6,
                "{name}: inv_freq[{i}] = {g:e}, formula {w:e} (rel {rel:e})"
            );
        }
        assert!(
            (rope.attention_scaling() as f64 - att).abs() < 1e-6,
            "{name}: attention factor"
        );
    }
    // The scaled tables really differ from the default one (controls for the checks above).
    let base = Rope::new(smollm()).unwrap();
    let l3 = Rope::new(llama3()).unwrap();
    let y = Rope::new(yarn()).unwrap();
    assert!(
        l3.inv_freq().last().unwrap()
            < &(Rope::new(RopeConfig {
                scaling: RopeScaling::None,
                ..llama3()
            })
            .unwrap()
            .inv_freq()
            .last()
            .unwrap()
                / 4.0)
    );
    assert!((y.attention_scaling() - 1.138_629_4).abs() < 1e-6);
    assert_eq!(base.inv_freq()[0], 1.0);
}

#[test]
fn llama3_keeps_high_frequencies_and_divides_low_ones() {
    let rope = Rope::new(llama3()).unwrap();
    let plain = Rope::new(RopeConfig {
        scaling: RopeScaling::None,
        ..llama3()
    })
    .unwrap();
    assert_eq!(rope.inv_freq()[0], plain.inv_freq()[0]);
    let last = plain.inv_freq().len() - 1;
    assert_eq!(rope.inv_freq()[last], plain.inv_freq()[last] / 8.0);
}

fn rope_contract(name: &str, cfg: RopeConfig, max_pos: usize) {
    let n_heads = 3;
    let width = n_heads * cfg.head_dim;
    let rope = Rope::new(cfg.clone()).unwrap();
    let (inv, att) = reference_inv_freq(&cfg);
    let gen = move |r: &mut Rng, i: usize| {
        let pos = if i.is_multiple_of(2) {
            r.below(64)
        } else {
            r.below(max_pos)
        };
        (pos, r.vec_normal(width, 1.0))
    };
    let reference = |row: &(usize, Vec<f32>), out: &mut [f64]| {
        out.copy_from_slice(&reference_rotate(&cfg, &inv, att, &row.1, row.0));
    };
    // The angle is an f32 (as in transformers): near position p it is only known to ~ulp(p), and a
    // one-ulp difference in an inv_freq entry moves it by a few ulp. Allow 4 ulp of the largest
    // angle (2^-21 * max_pos) times the pair's magnitude (a few units for these inputs).
    let tol = Tolerance::new(4.0 * max_pos as f64 / (1u64 << 21) as f64 + 1e-6, 1e-6);
    let op = RowOp {
        name,
        out_width: width,
        tolerance: tol,
        gen_row: &gen,
        reference: &reference,
    };
    let run = |rows: &[(usize, Vec<f32>)], out: &mut [f32]| {
        let positions: Vec<usize> = rows.iter().map(|r| r.0).collect();
        out.copy_from_slice(&rows.iter().flat_map(|r| r.1.clone()).collect::<Vec<_>>());
        rope.apply_rows(out, n_heads, &positions).unwrap();
    };
    let rep = assert_contract(&op, &run, &CheckConfig::default());
    eprintln!("{name}: max abs err {:e}", rep.max_abs_err);
    // Control: an off-by-one position.
    let off_by_one = |rows: &[(usize, Vec<f32>)], out: &mut [f32]| {
        let positions: Vec<usize> = rows.iter().map(|r| r.0 + 1).collect();
        out.copy_from_slice(&rows.iter().flat_map(|r| r.1.clone()).collect::<Vec<_>>());
        rope.apply_rows(out, n_heads, &positions).unwrap();
    };
    let f = assert_catches(&op, &off_by_one, &CheckConfig::quick());
    assert!(matches!(f, Failure::Accuracy { .. }), "{name}: {f}");
}

#[test]
fn rope_contract_all_configs() {
    for (name, cfg) in all_configs() {
        rope_contract(name, cfg.clone(), 64);
        rope_contract(name, cfg, 8192);
    }
}

#[test]
fn wrong_pairing_is_caught() {
    // Control: applying the interleaved pairing where the reference is half-split.
    let cfg = smollm();
    let wrong = Rope::new(RopeConfig {
        pairing: RopePairing::Interleaved,
        ..smollm()
    })
    .unwrap();
    let (inv, att) = reference_inv_freq(&cfg);
    let gen = |r: &mut Rng, _i: usize| (1 + r.below(100), r.vec_normal(64, 1.0));
    let reference = |row: &(usize, Vec<f32>), out: &mut [f64]| {
        out.copy_from_slice(&reference_rotate(&cfg, &inv, att, &row.1, row.0));
    };
    let op = RowOp {
        name: "rope pairing",
        out_width: 64,
        tolerance: Tolerance::new(1e-5, 1e-6),
        gen_row: &gen,
        reference: &reference,
    };
    let run = |rows: &[(usize, Vec<f32>)], out: &mut [f32]| {
        for (row, o) in rows.iter().zip(out.chunks_exact_mut(64)) {
            o.copy_from_slice(&row.1);
            wrong.apply(o, 1, row.0).unwrap();
        }
    };
    assert!(matches!(
        assert_catches(&op, &run, &CheckConfig::quick()),
        Failure::Accuracy { .. }
    ));
}

#[test]
fn partial_rotary_passes_tail_through_and_position_zero_is_identity() {
    let mut cfg = smollm();
    cfg.rotary_dim = 32;
    let rope = Rope::new(cfg).unwrap();
    let x = Rng::new(5).vec_normal(128, 1.0);
    let mut y = x.clone();
    rope.apply(&mut y, 2, 1234).unwrap();
    for h in 0..2 {
        assert_eq!(&y[h * 64 + 32..h * 64 + 64], &x[h * 64 + 32..h * 64 + 64]);
        assert_ne!(&y[h * 64..h * 64 + 32], &x[h * 64..h * 64 + 32]);
    }
    let mut z = x.clone();
    rope.apply(&mut z, 2, 0).unwrap();
    assert_eq!(z, x);
}

#[test]
fn rope_refuses_bad_configs() {
    let bad = |f: fn(&mut RopeConfig)| {
        let mut c = smollm();
        f(&mut c);
        Rope::new(c).is_err()
    };
    assert!(bad(|c| c.rotary_dim = 63));
    assert!(bad(|c| c.rotary_dim = 128));
    assert!(bad(|c| c.theta = 0.0));
    assert!(bad(|c| c.scaling = RopeScaling::Linear { factor: -1.0 }));
    assert!(!bad(|c| c.rotary_dim = 2));
    let rope = Rope::new(smollm()).unwrap();
    assert!(rope.apply(&mut [0.0; 63], 1, 3).is_err());
}

#[test]
fn rope_scaling_from_hf_json() {
    use serde_json::json;
    let parse = |v: serde_json::Value| RopeScaling::from_hf_json(Some(&v), 131072);
    assert_eq!(
        RopeScaling::from_hf_json(None, 8192).unwrap(),
        RopeScaling::None
    );
    assert_eq!(parse(json!(null)).unwrap(), RopeScaling::None);
    assert_eq!(
        parse(json!({"rope_type": "default"})).unwrap(),
        RopeScaling::None
    );
    assert_eq!(
        parse(json!({"type": "linear", "factor": 2.0})).unwrap(),
        RopeScaling::Linear { factor: 2.0 }
    );
    let l3 = json!({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0, "original_max_position_embeddings": 8192});
    assert_eq!(parse(l3).unwrap(), llama3().scaling);
    let y = json!({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768});
    assert_eq!(parse(y).unwrap(), yarn().scaling);
    // yarn without factor: max_position_embeddings / original.
    match parse(json!({"rope_type": "yarn", "original_max_position_embeddings": 4096})).unwrap() {
        RopeScaling::Yarn { factor, .. } => assert_eq!(factor, 32.0),
        other => panic!("{other:?}"),
    }
    // Named refusals.
    let e = parse(json!({"rope_type": "dynamic", "factor": 2.0})).unwrap_err();
    assert!(e.to_string().contains("dynamic"), "{e}");
    assert!(parse(json!({"rope_type": "linear"})).is_err());
    assert!(parse(json!({"rope_type": "llama3", "factor": "8"})).is_err());
}
