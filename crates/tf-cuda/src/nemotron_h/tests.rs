//! Host-side tests (no GPU): row checks, the per-layer shapes and routing taken from the plan,
//! and the slicing of stacked expert tensors, on the committed fixtures.

use super::layers::{dt_limit, expert_packs, preflight, routing};
use super::Widths;
use crate::error::CudaError;
use crate::load::packed;
use crate::moe::Routing;
use std::path::PathBuf;
use tf_families::nemotron_h::{ExpertWeights, NemotronBlock, NemotronHPlan, NemotronMixer};
use tf_families::ModelPlan;
use tf_formats::checkpoint::Checkpoint;
use tf_kernels::contract::Rng;
use tf_kernels::matmul::{matmul, PackedMatrix, WeightData};
use tf_kernels::pool::Pool;

fn fixture(name: &str) -> (Checkpoint, NemotronHPlan) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/nemotron_h")
        .join(name);
    let ck = Checkpoint::open(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let plan = match tf_families::plan(ck.config(), ck.entries()) {
        Ok(ModelPlan::NemotronH(p)) => p,
        other => panic!("{name}: not a Nemotron-H plan: {other:?}"),
    };
    (ck, plan)
}

#[test]
fn workspace_widths_cover_every_puzzle_layer() {
    let (_, plan) = fixture("puzzle/f32_hf");
    let w = Widths::of(&plan.config.layers, 128);
    // Mamba: 4 heads x 16, 2 groups of state 16: conv 64 + 64, proj 64 + 128 + 4.
    assert_eq!((w.inner, w.conv, w.proj), (64, 128, 196));
    assert_eq!((w.q, w.kv), (64, 64));
    // Per-layer experts 6 / 10 / 4, top-2 / 3 / 1, widths 64 / 128 / 192; MLP 192, shared 128.
    assert_eq!((w.experts, w.top_k, w.expert_inter), (10, 3, 192));
    assert_eq!((w.expert_dim, w.mlp), (64, 192));
}

#[test]
fn routing_and_dt_limits_follow_each_layer() {
    let (_, plan) = fixture("puzzle/f32_hf");
    let got: Vec<(usize, usize, f32, bool)> = plan
        .config
        .layers
        .iter()
        .filter_map(|b| match b {
            NemotronBlock::Moe(s) => match routing(s).unwrap() {
                Routing::Grouped(p) => Some((p.n_experts, p.top_k, p.scaling, p.norm_topk_prob)),
                other => panic!("{other:?}"),
            },
            _ => None,
        })
        .collect();
    assert_eq!(
        got,
        [(6, 2, 1.5, true), (10, 3, 1.5, true), (4, 1, 1.5, true)]
    );
    let limits = |name: &str| -> Vec<(f32, f32)> {
        let (_, plan) = fixture(name);
        plan.config
            .layers
            .iter()
            .filter_map(|b| match b {
                NemotronBlock::Mamba(s) => Some(dt_limit(s)),
                _ => None,
            })
            .collect()
    };
    assert_eq!(limits("plain_moe/f32_hf"), [(0.05, 0.8); 2]);
    assert_eq!(limits("latent_grouped/f32_hf"), [(0.0, f32::INFINITY); 2]);
}

/// The (up, down) expert matrices of the first MoE layer of a plan.
fn first_experts<'a>(
    ck: &'a Checkpoint,
    plan: &NemotronHPlan,
) -> (Vec<PackedMatrix<'a>>, Vec<PackedMatrix<'a>>) {
    for (l, b) in plan.layers.iter().zip(&plan.config.layers) {
        if let (NemotronMixer::Moe { experts, .. }, NemotronBlock::Moe(s)) = (&l.mixer, b) {
            let n = s.n_routed_experts as usize;
            return match experts {
                ExpertWeights::Stacked { up, down } => (
                    expert_packs(ck, up, n).unwrap(),
                    expert_packs(ck, down, n).unwrap(),
                ),
                ExpertWeights::PerExpert { up, down } => (
                    up.iter().map(|e| packed(ck, e).unwrap()).collect(),
                    down.iter().map(|e| packed(ck, e).unwrap()).collect(),
                ),
            };
        }
    }
    panic!("no MoE layer");
}

fn dense_bytes<'a>(m: &PackedMatrix<'a>) -> &'a [u8] {
    match *m.data() {
        WeightData::Dense { bytes, .. } => bytes,
        _ => panic!("not dense"),
    }
}

#[test]
fn stacked_experts_slice_into_the_per_expert_matrices() {
    // The same weights stored stacked (mlx-lm form) and one by one (HF form).
    let (ck_m, plan_m) = fixture("plain_moe/f32_mlx");
    let (ck_h, plan_h) = fixture("plain_moe/f32_hf");
    let (um, dm) = first_experts(&ck_m, &plan_m);
    let (uh, dh) = first_experts(&ck_h, &plan_h);
    assert_eq!((um.len(), uh.len()), (8, 8));
    for (a, b) in [(&um, &uh), (&dm, &dh)] {
        for e in 0..a.len() {
            assert_eq!((a[e].rows(), a[e].cols()), (b[e].rows(), b[e].cols()));
            assert_eq!(dense_bytes(&a[e]), dense_bytes(&b[e]), "expert {e}");
            // Control: the neighbouring expert differs, so the comparison can fail.
            assert_ne!(dense_bytes(&a[e]), dense_bytes(&b[(e + 1) % b.len()]));
        }
    }
}

#[test]
fn stacked_mlx_experts_keep_words_scales_and_biases_together() {
    // Each 4-bit expert slice multiplies like its f32 original (quantization error only) and
    // unlike its neighbour: the words, scales and biases were split at the same expert.
    let (ck_q, plan_q) = fixture("plain_moe/q4g64");
    let (ck_f, plan_f) = fixture("plain_moe/f32_hf");
    let (uq, _) = first_experts(&ck_q, &plan_q);
    let (uf, _) = first_experts(&ck_f, &plan_f);
    let pool = Pool::new(1);
    let cols = uf[0].cols();
    let x = Rng::new(7).vec_normal(cols, 1.0);
    let apply = |m: &PackedMatrix| {
        let mut y = vec![0f32; m.rows()];
        matmul(m, &x, 1, &mut y, &pool).unwrap();
        y
    };
    let dist = |a: &[f32], b: &[f32]| -> f64 {
        let num: f64 = a.iter().zip(b).map(|(p, q)| ((p - q) as f64).powi(2)).sum();
        let den: f64 = b.iter().map(|q| (*q as f64).powi(2)).sum();
        (num / den).sqrt()
    };
    for e in 0..uq.len() {
        assert!(matches!(
            uq[e].data(),
            WeightData::MlxAffine { bits: 4, .. }
        ));
        let q = apply(&uq[e]);
        let own = dist(&q, &apply(&uf[e]));
        let other = dist(&q, &apply(&uf[(e + 1) % uf.len()]));
        assert!(
            own < 0.2 && other > 0.5,
            "expert {e}: {own} vs neighbour {other}"
        );
    }
}

#[test]
fn a_stacked_tensor_of_another_expert_count_is_refused() {
    let (ck, plan) = fixture("plain_moe/f32_mlx");
    for l in &plan.layers {
        if let NemotronMixer::Moe {
            experts: ExpertWeights::Stacked { up, .. },
            ..
        } = &l.mixer
        {
            assert!(expert_packs(&ck, up, 7).is_err());
            assert!(expert_packs(&ck, up, 0).is_err());
            assert_eq!(expert_packs(&ck, up, 8).unwrap().len(), 8);
            return;
        }
    }
    panic!("no stacked experts");
}

#[test]
fn preflight_passes_dense_forms_and_names_what_the_gpu_lacks() {
    for name in [
        "latent_grouped/f32_hf",
        "plain_moe/f32_hf",
        "plain_moe/f32_mlx",
        "puzzle/f32_hf",
    ] {
        let (ck, plan) = fixture(name);
        preflight(&ck, &plan).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    // The MLX 4/6-bit forms pass exactly when crate::moe has grouped MLX expert matmuls;
    // otherwise the refusal names the routed-expert tensor.
    for (name, bits) in [
        ("latent_grouped/q4g64", 4),
        ("plain_moe/q6g32", 6),
        ("puzzle/q4g64", 4),
    ] {
        let (ck, plan) = fixture(name);
        let kernel = format!("tf_moe_matmul_mlx{bits}");
        match preflight(&ck, &plan) {
            Ok(()) => assert!(
                crate::moe::KERNEL_NAMES.contains(&kernel.as_str()),
                "{name} passed without {kernel}"
            ),
            Err(CudaError::UnsupportedFormat { format }) => {
                assert!(
                    !crate::moe::KERNEL_NAMES.contains(&kernel.as_str()),
                    "{name}: {format}"
                );
                assert!(
                    format.contains("experts") && format.contains(&kernel),
                    "{format}"
                );
            }
            Err(e) => panic!("{name}: {e}"),
        }
    }
}

#[test]
fn preflight_reads_synthetic_formats_from_the_entries() {
    // Lightning (Nemotron 3 Nano 30B-A3B shape) and Bolt (Puzzle) without bytes: the formats
    // come from the entries; a layout with grouped expert kernels passes, and MLX experts pass
    // exactly when crate::moe has their grouped matmul.
    for config in ["lightning", "bolt"] {
        for (layout, expert_kernel) in [
            ("bf16", "tf_moe_matmul_bf16"),
            ("q8_0", "tf_moe_matmul_q8_0"),
            ("mlx4g64", "tf_moe_matmul_mlx4"),
        ] {
            let ck = tf_families::synthetic::checkpoint(config, Some(layout), Some(1))
                .unwrap_or_else(|e| panic!("{config} {layout}: {e}"));
            assert!(ck.is_synthetic());
            let Ok(ModelPlan::NemotronH(plan)) = tf_families::plan(ck.config(), ck.entries())
            else {
                panic!("{config} {layout}: not a Nemotron-H plan");
            };
            // The recurrent and attention shapes are within the kernels' limits.
            let shapes: Vec<_> = plan
                .config
                .layers
                .iter()
                .filter_map(|b| match b {
                    NemotronBlock::Mamba(s) => Some(super::mamba_shape(s)),
                    _ => None,
                })
                .collect();
            assert!(!shapes.is_empty());
            crate::mamba::state_layout(&shapes).unwrap();
            for b in &plan.config.layers {
                if let NemotronBlock::Attention(a) = b {
                    assert!(a.head_dim <= 128, "{config}: head_dim {}", a.head_dim);
                }
            }
            let has = crate::moe::KERNEL_NAMES.contains(&expert_kernel);
            match preflight(&ck, &plan) {
                Ok(()) => assert!(has, "{config} {layout} passed without {expert_kernel}"),
                Err(e) => assert!(
                    !has && e.to_string().contains(expert_kernel),
                    "{config} {layout}: {e}"
                ),
            }
        }
    }
}
