//! Nemotron-H and Nemotron Puzzle plans and refusals, in HF and MLX on-disk forms. Every
//! refusal test first plans the unmutated sibling (the planted control).

mod common;

use common::*;
use serde_json::{json, Value};
use tf_families::nemotron_h::{
    ConvLayout, ExpertWeights, NemotronBlock, NemotronHPlan, NemotronMixer,
};
use tf_families::{plan, ModelPlan, Refusal};
use tf_formats::gguf::GgmlType;
use tf_formats::{DType, TensorEntry, WeightFormat};

fn nemo(p: ModelPlan) -> NemotronHPlan {
    match p {
        ModelPlan::NemotronH(n) => n,
        other => panic!("expected nemotron_h, got {}", other.family()),
    }
}

fn refusal(m: &Nemo, mutate: impl FnOnce(&mut Value, &mut Vec<TensorEntry>)) -> Refusal {
    let (mut cfg, mut en) = (m.config(), m.entries());
    plan(&cfg, &en).unwrap_or_else(|r| panic!("control must plan: {r}"));
    mutate(&mut cfg, &mut en);
    plan(&cfg, &en).expect_err("the mutation must be refused")
}

fn latent_model() -> Nemo {
    Nemo {
        latent: Some(32),
        mlx_form: true,
        mat: mlx(4, 32),
        ..Nemo::tiny()
    }
}

#[test]
fn hf_form_plans_each_block_type() {
    let m = Nemo::tiny();
    let p = nemo(plan(&m.config(), &m.entries()).unwrap());
    let kinds: String = p.config.layers.iter().map(|b| b.symbol()).collect();
    assert_eq!(kinds, "ME*-E");
    match &p.layers[0].mixer {
        NemotronMixer::Mamba {
            conv_layout,
            in_proj,
            ..
        } => {
            assert_eq!(*conv_layout, ConvLayout::ChannelOneKernel);
            // gate z (64) + conv (64 + 2*2*16) + dt (8)
            assert_eq!(in_proj.shape, vec![64 + 128 + 8, 64]);
        }
        other => panic!("{other:?}"),
    }
    match &p.layers[1].mixer {
        NemotronMixer::Moe {
            experts: ExpertWeights::PerExpert { up, down },
            shared,
            latent,
            ..
        } => {
            assert_eq!((up.len(), down.len()), (8, 8));
            assert!(shared.is_some() && latent.is_none());
        }
        other => panic!("{other:?}"),
    }
    match &p.config.layers[1] {
        NemotronBlock::Moe(s) => {
            assert_eq!(
                (
                    s.n_routed_experts,
                    s.num_experts_per_tok,
                    s.moe_intermediate_size
                ),
                (8, 2, 32)
            );
            assert_eq!(s.routed_scaling_factor, 2.5);
            assert!(s.norm_topk_prob);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        p.lm_head.as_ref().map(|t| t.name.as_str()),
        Some("lm_head.weight")
    );
}

#[test]
fn mlx_form_plans_with_stacked_experts_and_moved_conv_axis() {
    let m = Nemo {
        mlx_form: true,
        mat: mlx(4, 32),
        ..Nemo::tiny()
    };
    let p = nemo(plan(&m.config(), &m.entries()).unwrap());
    assert!(matches!(
        &p.layers[0].mixer,
        NemotronMixer::Mamba {
            conv_layout: ConvLayout::ChannelKernelOne,
            ..
        }
    ));
    assert!(matches!(
        &p.layers[4].mixer,
        NemotronMixer::Moe {
            experts: ExpertWeights::Stacked { .. },
            ..
        }
    ));
}

#[test]
fn mtp_tensors_are_ignored_not_refused() {
    let m = Nemo::tiny();
    let mut en = m.entries();
    en.push(e("mtp.layers.0.norm.weight", F32, &[64]));
    let p = nemo(plan(&m.config(), &en).unwrap());
    assert_eq!(p.ignored, vec!["mtp.layers.0.norm.weight".to_string()]);
    assert!(
        p.mtp.is_none(),
        "num_nextn_predict_layers is absent: no MTP planned"
    );
}

/// The MTP tensors of `steps` steps of pattern `*E` over `Nemo::tiny()`'s dimensions, written
/// from the MTP layout (fusion on a step's first block, final_layernorm on its last).
fn mtp_entries(steps: usize) -> Vec<TensorEntry> {
    let blocks = Nemo {
        blocks: vec![
            Blk::Attn,
            Blk::Moe {
                experts: None,
                top_k: None,
                inter: None,
            },
        ],
        ..Nemo::tiny()
    };
    let h = blocks.hidden;
    let mut out = Vec::new();
    for step in 0..steps {
        for t in blocks.entries() {
            let Some(rest) = t.name.strip_prefix("backbone.layers.") else {
                continue;
            };
            let (j, tail) = rest.split_once('.').unwrap();
            let i = step * 2 + j.parse::<usize>().unwrap();
            out.push(e(&format!("mtp.layers.{i}.{tail}"), t.format, &t.shape));
        }
        let (first, last) = (step * 2, step * 2 + 1);
        out.push(e(&format!("mtp.layers.{first}.enorm.weight"), F32, &[h]));
        out.push(e(&format!("mtp.layers.{first}.hnorm.weight"), F32, &[h]));
        out.push(e(
            &format!("mtp.layers.{first}.eh_proj.weight"),
            BF16,
            &[h, 2 * h],
        ));
        out.push(e(
            &format!("mtp.layers.{last}.final_layernorm.weight"),
            F32,
            &[h],
        ));
    }
    out
}

/// `Nemo::tiny()` with one MTP step `*E` declared and stored.
fn with_mtp() -> (Value, Vec<TensorEntry>) {
    let m = Nemo::tiny();
    let mut cfg = m.config();
    cfg["num_nextn_predict_layers"] = json!(1);
    cfg["mtp_hybrid_override_pattern"] = json!("*E");
    let mut en = m.entries();
    en.extend(mtp_entries(1));
    (cfg, en)
}

#[test]
fn mtp_layers_are_planned_when_declared_and_stored() {
    let (cfg, en) = with_mtp();
    let p = nemo(plan(&cfg, &en).unwrap());
    let mtp = p.mtp.expect("MTP planned");
    assert!(p.ignored.is_empty(), "every mtp.* tensor is claimed");
    assert_eq!(mtp.steps, 1);
    let kinds: String = mtp.blocks.iter().map(|b| b.symbol()).collect();
    assert_eq!(kinds, "*E");
    assert_eq!(mtp.sublayers.len(), 2);
    let start = mtp.sublayers[0]
        .start
        .as_ref()
        .expect("fusion on the first block");
    assert_eq!(start.eh_proj.shape, vec![64, 128]);
    assert!(mtp.sublayers[0].final_norm.is_none() && mtp.sublayers[1].start.is_none());
    assert_eq!(
        mtp.sublayers[1]
            .final_norm
            .as_ref()
            .map(|t| t.name.as_str()),
        Some("mtp.layers.1.final_layernorm.weight")
    );
    assert!(matches!(
        mtp.sublayers[0].layer.mixer,
        NemotronMixer::Attention { .. }
    ));
    match &mtp.sublayers[1].layer.mixer {
        NemotronMixer::Moe {
            experts: ExpertWeights::PerExpert { up, .. },
            ..
        } => assert_eq!(up.len(), 8),
        other => panic!("{other:?}"),
    }
    // The list form of the pattern and mtp_layers_block_type plan the same blocks.
    let mut list = cfg.clone();
    list["mtp_hybrid_override_pattern"] = json!(["attention", "moe"]);
    assert_eq!(
        nemo(plan(&list, &en).unwrap()).mtp.unwrap().blocks,
        mtp.blocks
    );
    let mut names = cfg.clone();
    names
        .as_object_mut()
        .unwrap()
        .remove("mtp_hybrid_override_pattern");
    names["mtp_layers_block_type"] = json!(["attention", "moe"]);
    assert_eq!(
        nemo(plan(&names, &en).unwrap()).mtp.unwrap().blocks,
        mtp.blocks
    );
    // Two steps: four sublayers, fusion on 0 and 2, final norms on 1 and 3.
    let m = Nemo::tiny();
    let mut two = cfg.clone();
    two["num_nextn_predict_layers"] = json!(2);
    let mut en2 = m.entries();
    en2.extend(mtp_entries(2));
    let mtp2 = nemo(plan(&two, &en2).unwrap()).mtp.unwrap();
    let starts: Vec<bool> = mtp2.sublayers.iter().map(|s| s.start.is_some()).collect();
    assert_eq!(starts, vec![true, false, true, false]);
}

#[test]
fn declared_mtp_without_tensors_is_served_without_it() {
    let m = Nemo::tiny();
    let mut cfg = m.config();
    cfg["num_nextn_predict_layers"] = json!(1);
    cfg["mtp_hybrid_override_pattern"] = json!("*E");
    let p = nemo(plan(&cfg, &m.entries()).unwrap());
    assert!(p.mtp.is_none());
    assert_eq!(p.config.num_nextn_predict_layers, 1);
}

#[test]
fn malformed_mtp_blocks_are_refused_by_name() {
    let (cfg, en) = with_mtp();
    let refuse = |mutate: &dyn Fn(&mut Value, &mut Vec<TensorEntry>)| {
        let (mut c, mut t) = (cfg.clone(), en.clone());
        plan(&c, &t).unwrap_or_else(|r| panic!("control must plan: {r}"));
        mutate(&mut c, &mut t);
        plan(&c, &t).expect_err("the mutation must be refused")
    };
    assert_eq!(
        refuse(&|_, t| remove(t, "mtp.layers.0.eh_proj.weight")),
        Refusal::MissingTensor {
            name: "mtp.layers.0.eh_proj.weight".into()
        }
    );
    assert_eq!(
        refuse(&|_, t| set(t, "mtp.layers.0.eh_proj.weight", |x| x.shape = vec![64, 64])),
        Refusal::ShapeMismatch {
            name: "mtp.layers.0.eh_proj.weight".into(),
            expected: vec![64, 128],
            found: vec![64, 64],
        }
    );
    assert_eq!(
        refuse(&|_, t| remove(t, "mtp.layers.1.final_layernorm.weight")),
        Refusal::MissingTensor {
            name: "mtp.layers.1.final_layernorm.weight".into()
        }
    );
    assert_eq!(
        refuse(&|_, t| remove(t, "mtp.layers.1.mixer.gate.weight")),
        Refusal::MissingTensor {
            name: "mtp.layers.1.mixer.gate.weight".into()
        }
    );
    assert_eq!(
        refuse(&|c, _| {
            c.as_object_mut()
                .unwrap()
                .remove("mtp_hybrid_override_pattern");
        }),
        Refusal::MissingField {
            field: "mtp_hybrid_override_pattern".into()
        }
    );
    assert!(matches!(
        refuse(&|c, _| c["mtp_hybrid_override_pattern"] = json!("*X")),
        Refusal::BadField { field, .. } if field == "mtp_hybrid_override_pattern"
    ));
    // A pattern that does not match the stored blocks: "E*" expects a router in block 0.
    assert_eq!(
        refuse(&|c, _| c["mtp_hybrid_override_pattern"] = json!("E*")),
        Refusal::MissingTensor {
            name: "mtp.layers.0.mixer.gate.weight".into()
        }
    );
    // A block beyond the pattern is not silently ignored once MTP is planned.
    assert_eq!(
        refuse(&|_, t| t.push(e("mtp.layers.2.norm.weight", F32, &[64]))),
        Refusal::UnexpectedTensor {
            name: "mtp.layers.2.norm.weight".into()
        }
    );
    // MTP blocks are checked like backbone ones, with their own values from
    // mtp_block_configs (numbered after the 5 backbone layers).
    assert_eq!(
        refuse(&|c, _| {
            c["mtp_block_configs"] = json!([
                {"block_type": "attention"},
                {"block_type": "moe", "num_experts_per_tok": 9}
            ])
        }),
        Refusal::TopKExceedsExperts {
            layer: 6,
            top_k: 9,
            experts: 8
        }
    );
}

#[test]
fn pattern_and_block_type_refusals() {
    let m = Nemo::tiny();
    let r = refusal(&m, |c, _| c["num_hidden_layers"] = json!(6));
    assert_eq!(
        r,
        Refusal::PatternLengthMismatch {
            field: "hybrid_override_pattern".into(),
            expected: 6,
            found: 5
        }
    );
    let r = refusal(&m, |c, _| c["hybrid_override_pattern"] = json!("MX*-E"));
    assert!(
        matches!(&r, Refusal::UnknownBlockType { layer: 1, block_type, .. } if block_type == "X"),
        "{r:?}"
    );
    let r = refusal(&m, |c, _| {
        c.as_object_mut().unwrap().remove("hybrid_override_pattern");
    });
    assert_eq!(
        r,
        Refusal::MissingField {
            field: "hybrid_override_pattern".into()
        }
    );
}

#[test]
fn router_and_mamba_parameters_must_be_dense() {
    let m = Nemo {
        mlx_form: true,
        mat: mlx(4, 32),
        ..Nemo::tiny()
    };
    let q = mlx(4, 32);
    let gate = "backbone.layers.1.mixer.gate.weight";
    let r = refusal(&m, |_, en| set(en, gate, |t| t.format = q));
    assert_eq!(
        r,
        Refusal::MustBeDense {
            tensor: gate.into(),
            format: q.to_string()
        }
    );
    let a = "backbone.layers.0.mixer.A_log";
    let q8 = WeightFormat::Gguf(GgmlType::Q8_0);
    let r = refusal(&m, |_, en| set(en, a, |t| t.format = q8));
    assert_eq!(r.name(), "MustBeDense");
}

#[test]
fn global_top_k_over_experts_is_refused() {
    let m = Nemo::tiny();
    let r = refusal(&m, |c, _| c["num_experts_per_tok"] = json!(9));
    assert_eq!(
        r,
        Refusal::TopKExceedsExperts {
            layer: 1,
            top_k: 9,
            experts: 8
        }
    );
}

#[test]
fn latent_projection_refusals() {
    let m = latent_model();
    let p = nemo(plan(&m.config(), &m.entries()).unwrap());
    assert!(matches!(
        &p.layers[1].mixer,
        NemotronMixer::Moe {
            latent: Some(_),
            ..
        }
    ));

    let fc1 = "backbone.layers.4.mixer.fc1_latent_proj.weight";
    let fc2 = "backbone.layers.4.mixer.fc2_latent_proj.weight";
    let r = refusal(&m, |_, en| remove(en, fc2));
    assert_eq!(
        r,
        Refusal::LatentProjectionMissing {
            layer: 4,
            which: "fc2".into()
        }
    );

    let q = mlx(4, 32);
    let r = refusal(&m, |_, en| set(en, fc1, |t| t.format = q));
    assert_eq!(
        r,
        Refusal::LatentProjectionQuantized {
            layer: 4,
            which: "fc1".into(),
            format: q.to_string()
        }
    );

    let r = refusal(&m, |_, en| set(en, fc1, |t| t.shape = vec![64, 32]));
    assert_eq!(
        r,
        Refusal::LatentProjectionTransposed {
            layer: 4,
            which: "fc1".into(),
            expected: vec![32, 64],
            found: vec![64, 32]
        }
    );

    let r = refusal(&m, |_, en| {
        set(en, fc2, |t| t.format = WeightFormat::Dense(DType::F16))
    });
    assert_eq!(
        r,
        Refusal::LatentProjectionDType {
            layer: 4,
            which: "fc2".into(),
            dtype: "F16".into()
        }
    );

    // F32 latent projections are fine.
    let f32_latent = Nemo {
        latent_fmt: F32,
        ..latent_model()
    };
    plan(&f32_latent.config(), &f32_latent.entries()).unwrap();
}

#[test]
fn routed_experts_over_hidden_with_a_latent_size() {
    // Experts exported at hidden width (64) while the config says latent 32.
    let m = latent_model();
    let over = Nemo {
        latent: None,
        ..latent_model()
    };
    let fc1 = "backbone.layers.1.mixer.switch_mlp.fc1.weight";
    let r = refusal(&m, |_, en| {
        let hidden_experts: Vec<TensorEntry> = over
            .entries()
            .into_iter()
            .filter(|t| t.name.contains("switch_mlp"))
            .collect();
        en.retain(|t| !t.name.contains("switch_mlp"));
        en.extend(hidden_experts);
    });
    assert_eq!(
        r,
        Refusal::RoutedExpertsOverHidden {
            layer: 1,
            tensor: fc1.into(),
            latent: 32,
            found: 64
        }
    );

    // HF per-expert form: the same check on experts.0.
    let hf = Nemo {
        mlx_form: false,
        ..latent_model()
    };
    let over_hf = Nemo {
        latent: None,
        ..hf.clone()
    };
    let r = refusal(&hf, |_, en| {
        let hidden_experts: Vec<TensorEntry> = over_hf
            .entries()
            .into_iter()
            .filter(|t| t.name.contains(".experts."))
            .collect();
        en.retain(|t| !t.name.contains(".experts."));
        en.extend(hidden_experts);
    });
    assert!(
        matches!(
            r,
            Refusal::RoutedExpertsOverHidden {
                layer: 1,
                found: 64,
                latent: 32,
                ..
            }
        ),
        "{r:?}"
    );
}

/// A Puzzle model whose MoE layers differ in experts, widths and top-k; layer 7 has the most
/// experts (64) and the largest top-k, layer 3 the fewest (6 experts).
fn puzzle() -> Nemo {
    let moe = |experts, top_k, inter| Blk::Moe {
        experts: Some(experts),
        top_k: Some(top_k),
        inter: Some(inter),
    };
    Nemo {
        puzzle: true,
        blocks: vec![
            Blk::Mamba,
            moe(16, 4, 32),
            Blk::Attn,
            moe(6, 3, 64),
            Blk::Mamba,
            // inherits the global 8 experts, top-2, width 32
            Blk::Moe {
                experts: None,
                top_k: None,
                inter: None,
            },
            Blk::Mlp,
            moe(64, 8, 96),
        ],
        mlx_form: true,
        mat: mlx(4, 32),
        ..Nemo::tiny()
    }
}

#[test]
fn puzzle_resolves_each_layer_with_its_own_values() {
    let m = puzzle();
    let p = nemo(plan(&m.config(), &m.entries()).unwrap());
    assert_eq!(p.config.model_type, "nemotron_h_puzzle");
    let moe: Vec<(usize, u64, u64, u64)> = p
        .config
        .layers
        .iter()
        .enumerate()
        .filter_map(|(l, b)| match b {
            NemotronBlock::Moe(s) => Some((
                l,
                s.n_routed_experts,
                s.num_experts_per_tok,
                s.moe_intermediate_size,
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        moe,
        vec![(1, 16, 4, 32), (3, 6, 3, 64), (5, 8, 2, 32), (7, 64, 8, 96)]
    );
}

#[test]
fn puzzle_top_k_is_checked_on_every_layer_not_the_largest() {
    let m = puzzle();
    // Layer 3 (6 experts) asks for top-7: still below the largest layer's 64 experts and at
    // most the largest top-k (8), so a check on the largest layer alone would pass.
    let r = refusal(&m, |c, _| {
        c["block_configs"][3]["num_experts_per_tok"] = json!(7)
    });
    assert_eq!(
        r,
        Refusal::TopKExceedsExperts {
            layer: 3,
            top_k: 7,
            experts: 6
        }
    );
    // An inherited value is checked against the layer's own count too.
    let r = refusal(&m, |c, _| {
        c["block_configs"][1]["n_routed_experts"] = json!(3)
    });
    assert_eq!(
        r,
        Refusal::TopKExceedsExperts {
            layer: 1,
            top_k: 4,
            experts: 3
        }
    );
}

#[test]
fn puzzle_block_config_refusals() {
    let m = puzzle();
    let r = refusal(&m, |c, _| {
        c["block_configs"][6]["block_type"] = json!("conv_ffn")
    });
    assert!(
        matches!(&r, Refusal::UnknownBlockType { layer: 6, block_type, .. } if block_type == "conv_ffn"),
        "{r:?}"
    );
    let r = refusal(&m, |c, _| {
        c["block_configs"].as_array_mut().unwrap().pop();
    });
    assert_eq!(
        r,
        Refusal::PatternLengthMismatch {
            field: "block_configs".into(),
            expected: 8,
            found: 7
        }
    );
    let r = refusal(&m, |c, _| {
        c["block_configs"][2]
            .as_object_mut()
            .unwrap()
            .remove("block_type");
    });
    assert_eq!(
        r,
        Refusal::MissingField {
            field: "block_configs[2].block_type".into()
        }
    );
    // A per-layer expert count that disagrees with the stored experts.
    let r = refusal(&m, |c, _| {
        c["block_configs"][3]["n_routed_experts"] = json!(7)
    });
    assert!(matches!(r, Refusal::ShapeMismatch { .. }), "{r:?}");
}
