//! Synthetic tensor lists: the plan accepts them, they match the real fixtures' tensors, and the
//! named configs size as the models they stand for (expected counts recomputed here from the
//! configs' numbers, not read from the summary code).

use super::*;
use crate::{plan, summarize, ModelPlan};
use std::path::PathBuf;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixture_dirs() -> Vec<PathBuf> {
    let mut v = Vec::new();
    for fam in ["llama", "nemotron_h"] {
        for model in std::fs::read_dir(repo().join("fixtures").join(fam)).unwrap() {
            let dir = model.unwrap().path();
            if dir.join("q4g64/config.json").is_file() {
                v.push(dir.join("q4g64"));
            }
        }
    }
    assert!(v.len() >= 9, "{v:?}");
    v
}

fn named(name: &str) -> Value {
    load_config(name).unwrap()
}

fn class_params(s: &crate::Summary, class: &str) -> u64 {
    s.classes
        .iter()
        .find(|c| c.class == class)
        .map_or(0, |c| c.params)
}

#[test]
fn fixture_configs_give_the_fixtures_tensors() {
    for dir in fixture_dirs() {
        let real = Checkpoint::open(&dir).unwrap();
        let cfg = real.config().clone();
        let quant = SyntheticQuant::from_config(&cfg).unwrap();
        let ck = checkpoint_from(cfg.clone(), &quant, 3).unwrap();
        let p = plan(ck.config(), ck.entries()).unwrap_or_else(|r| panic!("{dir:?}: {r}"));
        let rp = plan(real.config(), real.entries()).unwrap();
        assert_eq!(p.family(), rp.family());
        // Same names and shapes as the real checkpoint (conv1d: HF axis order here, MLX there).
        let mut mine: Vec<(String, Vec<u64>)> = ck
            .entries()
            .iter()
            .map(|e| (e.name.clone(), e.shape.clone()))
            .collect();
        let mut theirs: Vec<(String, Vec<u64>)> = real
            .entries()
            .iter()
            .filter(|e| rp.claims().iter().any(|c| c.entry.name == e.name))
            .map(|e| match e.shape[..] {
                [c, k, 1] if e.name.ends_with("conv1d.weight") => (e.name.clone(), vec![c, 1, k]),
                _ => (e.name.clone(), e.shape.clone()),
            })
            .collect();
        mine.sort();
        theirs.sort();
        assert_eq!(mine, theirs, "{dir:?}");
        // Quantized exactly where the fixture is (the fixtures' scales are f32, ours bf16), but
        // for the Puzzle fixture's f32 head, which its config.json does not mention.
        for e in ck.entries().iter().filter(|e| e.name != "lm_head.weight") {
            let r = real.entry(&e.name).unwrap();
            assert_eq!(
                e.format.is_quantized(),
                r.format.is_quantized(),
                "{}",
                e.name
            );
        }
        let (s, rs) = (
            summarize(&p, ck.entries(), 64),
            summarize(&rp, real.entries(), 64),
        );
        assert_eq!(
            (s.params_total, s.params_active),
            (rs.params_total, rs.params_active)
        );
    }
}

#[test]
fn fixture_configs_plan_in_every_layout() {
    for dir in fixture_dirs() {
        let cfg = Checkpoint::open(&dir).unwrap().config().clone();
        for spec in [
            "q4_0",
            "q4_1,embed=q8_0",
            "q8_0",
            "bf16",
            "f32",
            "mlx4g64,head=bf16",
        ] {
            let q = SyntheticQuant::parse(spec).unwrap();
            let en = synthetic_entries(&cfg, &q).unwrap_or_else(|e| panic!("{dir:?} {spec}: {e}"));
            plan(&cfg, &en).unwrap_or_else(|r| panic!("{dir:?} {spec}: {r}"));
            // Matrices whose width is whole blocks take the layout; dense roles stay dense.
            assert!(en.iter().any(|e| e.format == q.matrices), "{dir:?} {spec}");
        }
    }
}

/// Parameters of a Nemotron-H model from its numbers: (total, active).
#[allow(clippy::too_many_arguments)]
fn nemotron_params(
    hidden: u64,
    vocab: u64,
    mamba: u64,
    attn: u64,
    moe: &[(u64, u64, u64)],
    latent: Option<u64>,
    shared: u64,
    norms_layers: u64,
) -> (u64, u64) {
    let (mh, md, state, groups, k) = (if hidden == 2688 { 64 } else { 128 }, 64, 128, 8, 4);
    let inter = mh * md;
    let conv = inter + 2 * groups * state;
    let mamba_layer =
        (inter + conv + mh) * hidden + conv * k + conv + 3 * mh + inter + inter * hidden;
    let attn_layer = 2 * (32 * 128 * hidden) + 2 * (2 * 128 * hidden);
    let d = latent.unwrap_or(hidden);
    let lat = latent.map_or(0, |l| 2 * l * hidden);
    let mut total = 2 * vocab * hidden + norms_layers * hidden + hidden;
    total += mamba * mamba_layer + attn * attn_layer;
    let mut active = total;
    for &(e, topk, w) in moe {
        let fixed = e * hidden + e + lat + 2 * shared * hidden;
        total += fixed + e * 2 * w * d;
        active += fixed + topk * 2 * w * d;
    }
    (total, active)
}

#[test]
fn lightning_sizes_as_nemotron_3_nano_30b_a3b() {
    let cfg = named("lightning");
    let ck = checkpoint("lightning", None, None).unwrap();
    assert_eq!(ck.synthetic_seed(), Some(DEFAULT_SEED));
    let p = plan(&cfg, ck.entries()).unwrap();
    assert_eq!(p.family(), "nemotron_h");
    let s = summarize(&p, ck.entries(), 4096);
    let kinds: Vec<(String, usize)> = s.layers.iter().map(|l| (l.kind.clone(), l.count)).collect();
    assert_eq!(
        kinds,
        [
            ("mamba".into(), 23),
            ("moe".into(), 23),
            ("attention".into(), 6)
        ]
    );
    let (total, active) =
        nemotron_params(2688, 131072, 23, 6, &[(128, 6, 1856); 23], None, 3712, 52);
    assert_eq!((s.params_total, s.params_active), (total, active));
    assert!((31.5e9..31.7e9).contains(&(total as f64)), "{total}");
    assert!((3.4e9..3.7e9).contains(&(active as f64)), "{active}");
    // MLX 4-bit g64 with bf16 scales: 4.5 bits per matrix parameter.
    assert_eq!(
        class_params(&s, "routed-experts"),
        23 * 128 * 2 * 1856 * 2688
    );
    let bytes = s.planned_bytes as f64;
    assert!((17.0e9..18.5e9).contains(&bytes), "{bytes}");
    println!("{s}");
}

#[test]
fn bolt_sizes_as_a_74b_a9b_puzzle_that_fits_one_h200() {
    let ck = checkpoint("bolt", None, Some(5)).unwrap();
    let p = plan(ck.config(), ck.entries()).unwrap();
    assert_eq!(p.family(), "nemotron_h_puzzle");
    let ModelPlan::NemotronH(np) = &p else {
        panic!()
    };
    assert_eq!(np.layers.len(), 88);
    let s = summarize(&p, ck.entries(), 8192);
    let experts = [240, 304, 368, 432, 496];
    let widths = [2688, 2560, 2304, 1920, 1856];
    let moe: Vec<(u64, u64, u64)> = (0..40)
        .map(|j| (experts[j % 5], 9, widths[j % 5]))
        .collect();
    let (total, active) = nemotron_params(4096, 131072, 40, 8, &moe, Some(1024), 5376, 88);
    assert_eq!((s.params_total, s.params_active), (total, active));
    assert!((73.0e9..75.0e9).contains(&(total as f64)), "{total}");
    assert!((9.0e9..10.0e9).contains(&(active as f64)), "{active}");
    let class = |c: &str| {
        s.classes
            .iter()
            .find(|x| x.class == c)
            .unwrap()
            .formats
            .clone()
    };
    assert_eq!(class("routed-experts"), ["mlx-affine-4bit-g64"]);
    assert_eq!(class("expert-projections"), ["BF16"]);
    assert_eq!(class("head"), ["BF16"]);
    assert_eq!(class("embedding"), ["mlx-affine-4bit-g64"]);
    let bytes = s.planned_bytes as f64;
    assert!(
        (40.0e9..45.0e9).contains(&bytes),
        "{bytes} bytes: must fit one H200 with room"
    );
    println!("{s}");
}

#[test]
fn llama3_8b_at_q4_0() {
    let ck = checkpoint("llama3-8b", Some("q4_0"), None).unwrap();
    let p = plan(ck.config(), ck.entries()).unwrap();
    let s = summarize(&p, ck.entries(), 8192);
    let (h, l, f, v) = (4096u64, 32u64, 14336u64, 128256u64);
    let layer = 2 * h * h + 2 * 1024 * h + 3 * h * f + 2 * h;
    assert_eq!(s.params_total, 2 * v * h + l * layer + h);
    assert_eq!(
        s.classes.iter().find(|c| c.class == "mlp").unwrap().formats,
        ["Q4_0"]
    );
    assert_eq!(
        s.classes
            .iter()
            .find(|c| c.class == "norms")
            .unwrap()
            .formats,
        ["F32"]
    );
    // The default model's GGUF layout: Q4_1, Q8_0 embedding (tied head), F32 norms.
    let ck = checkpoint("smollm2-135m", Some("q4_1,embed=q8_0,dense=f32"), None).unwrap();
    let s = summarize(&plan(ck.config(), ck.entries()).unwrap(), ck.entries(), 64);
    assert!(s.head_tied);
    assert_eq!(
        s.classes
            .iter()
            .find(|c| c.class == "embedding")
            .unwrap()
            .formats,
        ["Q8_0"]
    );
    assert_eq!(s.params_total, 134_515_008);
}

#[test]
fn layouts_and_configs_are_read_or_refused_by_name() {
    let q = SyntheticQuant::parse("q4_1,embed=q8_0,dense=f32").unwrap();
    assert_eq!(q.matrices, WeightFormat::Gguf(GgmlType::Q4_1));
    assert_eq!(q.embedding, Some(WeightFormat::Gguf(GgmlType::Q8_0)));
    assert_eq!(q.dense, DType::F32);
    assert_eq!(
        q.matrix_format("model.embed_tokens.weight"),
        WeightFormat::Gguf(GgmlType::Q8_0)
    );
    assert_eq!(
        parse_format("mlx6g32"),
        Some(WeightFormat::MlxAffine {
            bits: 6,
            group_size: 32,
            scales: DType::BF16
        })
    );
    for bad in [
        "q9_9",
        "q4_0,head",
        "q4_0,dense=q8_0",
        "q4_0,colour=f32",
        "",
    ] {
        assert!(
            matches!(
                SyntheticQuant::parse(bad),
                Err(SyntheticError::Layout { .. })
            ),
            "{bad}"
        );
    }
    assert!(matches!(
        load_config("no-such-model"),
        Err(SyntheticError::Config { .. })
    ));
    let from_dir = load_config(
        repo()
            .join("fixtures/nemotron_h/puzzle/q4g64")
            .to_str()
            .unwrap(),
    );
    assert_eq!(from_dir.unwrap()["model_type"], "nemotron_h_puzzle");
    // A config the family refuses is reported as the family's refusal, not a stuck generator.
    let mut cfg = named("bolt");
    cfg["block_configs"][1]["num_experts_per_tok"] = 999.into();
    let e = checkpoint_from(cfg, &SyntheticQuant::parse("q4_0").unwrap(), 1).unwrap_err();
    assert!(
        matches!(
            e,
            SyntheticError::Refused(Refusal::TopKExceedsExperts { .. })
        ),
        "{e}"
    );
    let e = checkpoint(r#"{"model_type": "gpt2"}"#, None, None).unwrap_err();
    assert!(
        matches!(e, SyntheticError::Refused(Refusal::UnknownModelType { .. })),
        "{e}"
    );
}

#[test]
fn layout_from_config_follows_mlx_overrides() {
    let q = SyntheticQuant::from_config(&named("bolt")).unwrap();
    assert_eq!(
        q.matrix_format("lm_head.weight"),
        WeightFormat::Dense(DType::BF16)
    );
    let m = q.matrix_format("backbone.layers.1.mixer.switch_mlp.fc1.weight");
    assert_eq!(
        m,
        WeightFormat::MlxAffine {
            bits: 4,
            group_size: 64,
            scales: DType::BF16
        }
    );
    let q = SyntheticQuant::from_config(&named("llama3-8b")).unwrap();
    assert_eq!(q.matrices, WeightFormat::Dense(DType::BF16));
}
