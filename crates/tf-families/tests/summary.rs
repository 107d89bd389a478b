//! Sizing summaries: expected values are recomputed here from the model descriptions, not
//! copied from the crate's output.

mod common;

use common::*;
use tf_families::{plan, summarize, STATE_ELEMENT_BYTES};
use tf_formats::gguf::GgmlType;
use tf_formats::{TensorEntry, WeightFormat};

/// Expert counts of the Bolt-like MoE layers, cycled in order.
const BOLT_EXPERTS: [u64; 5] = [240, 304, 368, 432, 496];
/// Routed expert widths, cycled with the counts (guessed).
const BOLT_WIDTHS: [u64; 5] = [2688, 2304, 1920, 1536, 1152];

/// A Bolt-like Nemotron Puzzle model. Known from the brief: MoE layers with 240/304/368/432/496
/// experts, top-k 9, a 1024-wide latent with BF16 latent projections, an unquantized BF16
/// lm_head and MLX 4-bit weights elsewhere. Guessed (believable, not the real model): hidden
/// 4096, 48 layers in six repeats of M E M E M E * E (18 Mamba, 24 MoE, 6 attention), expert
/// widths cycling 2688..1152, one shared expert of width 5376, 128 Mamba heads of 64 with state
/// 128 in 8 groups, 32 query / 2 KV heads of 128, vocab 131072, group size 64.
fn bolt() -> Nemo {
    let mut blocks = Vec::new();
    let mut j = 0;
    for _ in 0..6 {
        for b in ["M", "E", "M", "E", "M", "E", "*", "E"] {
            blocks.push(match b {
                "M" => Blk::Mamba,
                "*" => Blk::Attn,
                _ => {
                    let blk = Blk::Moe {
                        experts: Some(BOLT_EXPERTS[j % 5]),
                        top_k: Some(9),
                        inter: Some(BOLT_WIDTHS[j % 5]),
                    };
                    j += 1;
                    blk
                }
            });
        }
    }
    Nemo {
        hidden: 4096,
        vocab: 131072,
        heads: 32,
        kv_heads: 2,
        head_dim: 128,
        mamba_heads: 128,
        mamba_head_dim: 64,
        state: 128,
        groups: 8,
        conv_kernel: 4,
        mlp_inter: 8192,
        experts: 128,
        top_k: 6,
        moe_inter: 1024,
        shared_inter: Some(5376),
        latent: Some(1024),
        blocks,
        puzzle: true,
        mlx_form: true,
        mat: mlx(4, 64),
        latent_fmt: BF16,
        head_fmt: BF16,
    }
}

fn elements(en: &[TensorEntry]) -> u64 {
    en.iter().map(|t| t.elements()).sum()
}

#[test]
fn bolt_like_puzzle_summary() {
    let m = bolt();
    let (cfg, en) = (m.config(), m.entries());
    let p = plan(&cfg, &en).unwrap_or_else(|r| panic!("{r}"));
    let context = 8192;
    let s = summarize(&p, &en, context);

    assert_eq!(s.family, "nemotron_h_puzzle");
    let layers: Vec<(String, usize)> = s.layers.iter().map(|l| (l.kind.clone(), l.count)).collect();
    assert_eq!(
        layers,
        vec![
            ("mamba".into(), 18),
            ("moe".into(), 24),
            ("attention".into(), 6)
        ]
    );

    // Every tensor is used; routed experts are active 9 of each layer's own count.
    let total = elements(&en);
    assert_eq!(s.params_total, total);
    let inactive: u64 = (0..24)
        .map(|j| (BOLT_EXPERTS[j % 5] - 9) * 2 * 1024 * BOLT_WIDTHS[j % 5])
        .sum();
    assert_eq!(s.params_active, total - inactive);
    assert!(
        s.params_active * 5 < s.params_total,
        "MoE: most parameters are inactive"
    );

    let bytes: u64 = en
        .iter()
        .map(|t| t.format.storage_bytes(t.elements()))
        .sum();
    assert_eq!(s.weight_bytes, bytes);
    assert_eq!(s.planned_bytes, bytes);

    let class = |c: &str| {
        s.classes
            .iter()
            .find(|x| x.class == c)
            .unwrap_or_else(|| panic!("no {c}"))
    };
    assert_eq!(class("routed-experts").formats, vec!["mlx-affine-4bit-g64"]);
    assert_eq!(class("expert-projections").formats, vec!["BF16"]);
    assert_eq!(class("head").formats, vec!["BF16"]);
    assert_eq!(class("embedding").formats, vec!["mlx-affine-4bit-g64"]);
    assert_eq!(class("router").formats, vec!["F32"]);
    assert_eq!(class("head").params, 131072 * 4096);
    assert!(!s.head_tied);

    let b = STATE_ELEMENT_BYTES;
    let mm = &s.memory;
    assert_eq!(mm.kv_bytes_per_token, 6 * 2 * 2 * 128 * b);
    assert_eq!(mm.kv_bytes, mm.kv_bytes_per_token * context);
    let conv_dim = 128 * 64 + 2 * 8 * 128;
    assert_eq!(mm.conv_state_bytes, 18 * 3 * conv_dim * b);
    assert_eq!(mm.ssm_state_bytes, 18 * 128 * 64 * 128 * b);
    assert_eq!(
        mm.total_bytes,
        mm.kv_bytes + mm.conv_state_bytes + mm.ssm_state_bytes
    );

    let text = s.to_string();
    println!("{text}");
    assert!(text.contains("48: 18 mamba, 24 moe, 6 attention"), "{text}");
    assert!(text.contains("active per token"), "{text}");
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["params_total"], serde_json::json!(total));
}

#[test]
fn dense_llama_summary() {
    let cfg = llama_config("llama", 3, true);
    let en = llama_entries(&cfg, WeightFormat::Gguf(GgmlType::Q8_0));
    let s = summarize(&plan(&cfg, &en).unwrap(), &en, 100);
    assert_eq!(s.params_total, elements(&en));
    assert_eq!(s.params_active, s.params_total);
    assert_eq!(s.layers.len(), 1);
    assert_eq!(
        (s.layers[0].kind.as_str(), s.layers[0].count),
        ("attention+mlp", 3)
    );
    assert_eq!(
        s.memory.kv_bytes_per_token,
        3 * 2 * 2 * 16 * STATE_ELEMENT_BYTES
    );
    assert_eq!(s.memory.kv_bytes, s.memory.kv_bytes_per_token * 100);
    assert_eq!(s.memory.conv_state_bytes + s.memory.ssm_state_bytes, 0);
    assert!(s.slow_formats.is_empty());
    let text = s.to_string();
    assert!(
        text.contains("3 attention+mlp") && text.contains("Q8_0"),
        "{text}"
    );
}

#[test]
fn slow_paths_and_sliding_windows_are_reported() {
    let cfg = llama_config("llama", 2, true);
    let en = llama_entries(&cfg, WeightFormat::Gguf(GgmlType::Q5_0));
    let s = summarize(&plan(&cfg, &en).unwrap(), &en, 10);
    assert_eq!(s.slow_formats, vec!["Q5_0"]);

    // Muse Spark: 3 sliding layers (window 32) and one full layer.
    let (mc, me) = (muse_config(), muse_entries(false, BF16));
    let s = summarize(&plan(&mc, &me).unwrap(), &me, 1000);
    let per_layer = 2 * 2 * 16 * STATE_ELEMENT_BYTES;
    assert_eq!(s.memory.kv_bytes_per_token, 4 * per_layer);
    assert_eq!(s.memory.kv_bytes, per_layer * (3 * 32 + 1000));
    // Each MoE layer has 8 experts of which 2 are active.
    let routed_per_layer = 8 * 3 * 64 * 32;
    assert_eq!(
        s.params_total - s.params_active,
        4 * routed_per_layer * 6 / 8
    );
}
