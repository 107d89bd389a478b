//! Muse Spark plans in both on-disk forms, and its refusals (each after its valid control).

mod common;

use common::*;
use serde_json::{json, Value};
use tf_families::muse_spark::{
    MuseAttnProj, MuseExperts, MuseForm, MuseResidualGates, MuseSparkPlan,
};
use tf_families::{plan, ModelPlan, Refusal};
use tf_formats::TensorEntry;

fn muse(p: ModelPlan) -> MuseSparkPlan {
    match p {
        ModelPlan::MuseSpark(m) => m,
        other => panic!("expected muse_spark, got {}", other.family()),
    }
}

fn refusal(mlx_form: bool, mutate: impl FnOnce(&mut Value, &mut Vec<TensorEntry>)) -> Refusal {
    let (mut cfg, mut en) = (muse_config(), muse_entries(mlx_form, BF16));
    plan(&cfg, &en).unwrap_or_else(|r| panic!("control must plan: {r}"));
    mutate(&mut cfg, &mut en);
    plan(&cfg, &en).expect_err("the mutation must be refused")
}

#[test]
fn hf_form_is_detected_and_planned() {
    let p = muse(plan(&muse_config(), &muse_entries(false, BF16)).unwrap());
    assert_eq!(p.form, MuseForm::HuggingFace);
    let l = &p.layers[0];
    assert!(matches!(l.attn, MuseAttnProj::Separate { .. }));
    assert!(matches!(l.residual_gates, MuseResidualGates::Raw { .. }));
    assert!(matches!(l.experts, MuseExperts::GateUp { .. }));
    assert_eq!(p.config.output_multiplier, 0.1767766952966369);
    assert_eq!(p.config.eos_token_ids, vec![200001]);
}

#[test]
fn mlx_form_is_detected_and_planned() {
    let p = muse(plan(&muse_config(), &muse_entries(true, mlx(4, 32))).unwrap());
    assert_eq!(p.form, MuseForm::Mlx);
    match &p.layers[1].attn {
        MuseAttnProj::Fused { qkvg } => assert_eq!(qkvg.shape, vec![2 * (64 + 32), 64]),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        p.layers[1].residual_gates,
        MuseResidualGates::Coefficients { .. }
    ));
    assert!(matches!(p.layers[1].experts, MuseExperts::Split { .. }));
}

#[test]
fn per_layer_rope_and_window() {
    let p = muse(plan(&muse_config(), &muse_entries(false, BF16)).unwrap());
    let rope: Vec<Option<f64>> = p.layers.iter().map(|l| l.rope_theta).collect();
    assert_eq!(
        rope,
        vec![Some(500000.0), Some(500000.0), Some(500000.0), None]
    );
    let sliding: Vec<bool> = p.layers.iter().map(|l| l.sliding).collect();
    assert_eq!(sliding, vec![true, true, true, false]);

    // Omitted lists follow transformers: NoPE full attention every 4th layer from the end.
    let mut cfg = muse_config();
    let t = cfg["text_config"].as_object_mut().unwrap();
    t.remove("layer_types");
    t.remove("layer_rope_theta");
    let q = muse(plan(&cfg, &muse_entries(false, BF16)).unwrap());
    assert_eq!(q.config.layer_sliding, vec![true, true, true, false]);
    assert_eq!(
        q.config.layer_rope_theta,
        vec![500000.0, 500000.0, 500000.0, 0.0]
    );
}

#[test]
fn vision_tower_is_ignored() {
    let mut en = muse_entries(false, BF16);
    en.push(e(
        "model.vision_tower.layers.0.attn.qkv_proj.weight",
        BF16,
        &[96, 32],
    ));
    let p = muse(plan(&muse_config(), &en).unwrap());
    assert_eq!(p.ignored.len(), 1);
}

#[test]
fn top_k_over_experts() {
    let r = refusal(false, |c, _| {
        c["text_config"]["num_experts_per_tok"] = json!(9)
    });
    assert_eq!(
        r,
        Refusal::TopKExceedsExperts {
            layer: 0,
            top_k: 9,
            experts: 8
        }
    );
}

#[test]
fn dense_feed_forward_layers_are_refused() {
    let r = refusal(false, |c, _| {
        c["text_config"]["mlp_layer_types"] = json!(["sparse", "dense", "sparse", "sparse"])
    });
    assert!(
        matches!(&r, Refusal::UnknownBlockType { layer: 1, block_type, .. } if block_type == "dense"),
        "{r:?}"
    );
}

#[test]
fn list_lengths_must_match_layers() {
    let r = refusal(false, |c, _| {
        c["text_config"]["layer_rope_theta"] = json!([1.0, 0.0])
    });
    assert_eq!(
        r,
        Refusal::PatternLengthMismatch {
            field: "text_config.layer_rope_theta".into(),
            expected: 4,
            found: 2
        }
    );
}

#[test]
fn missing_residual_gate_and_wrong_expert_shape() {
    let gate = "model.language_model.layers.2.post_feedforward_residual_gate.gate";
    let r = refusal(false, |_, en| remove(en, gate));
    assert_eq!(r, Refusal::MissingTensor { name: gate.into() });
    let alpha = "model.language_model.layers.0.add_ffn_beta";
    let r = refusal(true, |_, en| remove(en, alpha));
    assert_eq!(r, Refusal::MissingTensor { name: alpha.into() });
    let gu = "model.language_model.layers.3.mlp.experts.gate_up_proj";
    let r = refusal(false, |_, en| set(en, gu, |t| t.shape = vec![8, 64, 32]));
    assert_eq!(
        r,
        Refusal::ShapeMismatch {
            name: gu.into(),
            expected: vec![8, 128, 32],
            found: vec![8, 64, 32]
        }
    );
}

#[test]
fn router_must_be_dense() {
    let g = "model.language_model.layers.1.mlp.gate.weight";
    let r = refusal(true, |_, en| set(en, g, |t| t.format = mlx(8, 64)));
    assert_eq!(r.name(), "MustBeDense");
}
