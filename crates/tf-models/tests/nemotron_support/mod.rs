//! Shared helpers of the Nemotron-H fixture tests: fixture paths, reference logits, scoring
//! in any chunking, and the fidelity metrics (top-1, max |Δ| over the logits' spread, KL).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use tf_formats::safetensors::SafetensorsCheckpoint;
use tf_models::{load, LoadOptions, Model, Row};

/// The committed fixtures and their weight forms.
pub const FIXTURES: &[(&str, &[&str])] = &[
    ("latent_grouped", &["f32_hf", "q4g64", "q6g32"]),
    ("plain_moe", &["f32_hf", "f32_mlx", "q4g64", "q6g32"]),
    ("puzzle", &["f32_hf", "q4g64"]),
];

/// `fixtures/nemotron_h` in the repository.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/nemotron_h")
}

/// The scored token sequence of a fixture.
pub fn tokens(fixture: &str) -> Vec<u32> {
    let text = std::fs::read_to_string(root().join(fixture).join("tokens.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// A fixture's checkpoint directory.
pub fn dir(fixture: &str, form: &str) -> PathBuf {
    root().join(fixture).join(form)
}

/// Loads a fixture form.
pub fn model(fixture: &str, form: &str, threads: usize) -> Box<dyn Model> {
    load(&dir(fixture, form), &LoadOptions { threads })
        .unwrap_or_else(|e| panic!("{fixture}/{form} loads: {e}"))
}

/// One reference tensor (`logits_full`, `logits_serial`, `logits_chunk5`) as f32.
pub fn reference(fixture: &str, form: &str, name: &str) -> Vec<f32> {
    let st =
        SafetensorsCheckpoint::open(&dir(fixture, form).join("reference.safetensors")).unwrap();
    let t = st.tensor(name).unwrap();
    t.data
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// Teacher-forced logits of `tokens` on a fresh stream, fed in chunks of `chunk`.
pub fn score(m: &mut dyn Model, tokens: &[u32], chunk: usize) -> Vec<f32> {
    let mut state = m.new_state();
    let mut all = Vec::new();
    let mut logits = Vec::new();
    for (c, part) in tokens.chunks(chunk).enumerate() {
        let rows: Vec<Row> = part
            .iter()
            .enumerate()
            .map(|(i, &token)| Row {
                stream: 0,
                pos: c * chunk + i,
                token,
                logits: true,
            })
            .collect();
        m.forward(&rows, &mut [&mut state], &mut logits).unwrap();
        all.extend_from_slice(&logits);
    }
    all
}

/// Fidelity of `ours` against `reference`, both `[T, vocab]`.
#[derive(Debug, Clone, Copy)]
pub struct Fidelity {
    /// Positions whose argmax agrees.
    pub top1: f64,
    /// max over positions of max |Δlogit| / (max - min of the reference row).
    pub rel: f64,
    /// KL(ref ‖ ours) mean, p99 and max over positions (nats).
    pub kl_mean: f64,
    pub kl_p99: f64,
    pub kl_max: f64,
}

fn argmax(v: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best
}

fn log_softmax(v: &[f32]) -> Vec<f64> {
    let m = v.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b as f64));
    let s: f64 = v.iter().map(|&x| (x as f64 - m).exp()).sum();
    v.iter().map(|&x| x as f64 - m - s.ln()).collect()
}

/// Compares two logit matrices of rows of width `vocab`.
pub fn fidelity(reference: &[f32], ours: &[f32], vocab: usize) -> Fidelity {
    assert_eq!(reference.len(), ours.len());
    let t = reference.len() / vocab;
    let (mut agree, mut rel, mut kls) = (0usize, 0f64, Vec::with_capacity(t));
    for (r, o) in reference.chunks_exact(vocab).zip(ours.chunks_exact(vocab)) {
        agree += usize::from(argmax(r) == argmax(o));
        let hi = r.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
        let lo = r.iter().fold(f32::INFINITY, |a, &b| a.min(b));
        let d = r
            .iter()
            .zip(o)
            .map(|(&a, &b)| (a as f64 - b as f64).abs())
            .fold(0.0, f64::max);
        rel = rel.max(d / (hi - lo) as f64);
        let (lr, lq) = (log_softmax(r), log_softmax(o));
        let kl: f64 = lr.iter().zip(&lq).map(|(&a, &b)| a.exp() * (a - b)).sum();
        kls.push(kl.max(0.0));
    }
    kls.sort_by(f64::total_cmp);
    let p99 = kls[((kls.len() as f64 * 0.99).ceil() as usize).clamp(1, kls.len()) - 1];
    Fidelity {
        top1: agree as f64 / t as f64,
        rel,
        kl_mean: kls.iter().sum::<f64>() / t as f64,
        kl_p99: p99,
        kl_max: *kls.last().unwrap(),
    }
}

/// The bar every fixture must meet against each of mlx-lm's float32 references.
pub const MAX_REL: f64 = 1e-5;
/// Largest per-position KL(ref ‖ ours) allowed (nats).
pub const MAX_KL: f64 = 1e-10;

/// Whether a fidelity result meets the bar (all positions agree on top-1, `rel <= MAX_REL`,
/// `kl_max <= MAX_KL`).
pub fn passes(f: &Fidelity) -> bool {
    f.top1 == 1.0 && f.rel <= MAX_REL && f.kl_max <= MAX_KL
}

/// A scratch copy of a fixture form, mutated: `edit_config` changes config.json, and each
/// `(tensor, factor, add)` maps a float32 tensor's values `v -> v * factor + add`.
pub fn mutated(
    fixture: &str,
    form: &str,
    tag: &str,
    edit_config: &dyn Fn(&mut serde_json::Value),
    tensors: &[(&str, f32, f32)],
) -> PathBuf {
    let out = std::env::temp_dir().join(format!(
        "tf-nemotron-{}-{fixture}-{form}-{tag}",
        std::process::id()
    ));
    std::fs::create_dir_all(&out).unwrap();
    let src = dir(fixture, form);
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    edit_config(&mut cfg);
    std::fs::write(out.join("config.json"), cfg.to_string()).unwrap();
    let mut bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let hlen = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + hlen]).unwrap();
    for &(name, factor, add) in tensors {
        let t = &header[name];
        assert_eq!(t["dtype"], "F32", "{name} must be a float32 tensor");
        let off = t["data_offsets"].as_array().unwrap();
        let (a, b) = (
            off[0].as_u64().unwrap() as usize,
            off[1].as_u64().unwrap() as usize,
        );
        for c in bytes[8 + hlen + a..8 + hlen + b].chunks_exact_mut(4) {
            let v = f32::from_le_bytes([c[0], c[1], c[2], c[3]]) * factor + add;
            c.copy_from_slice(&v.to_le_bytes());
        }
    }
    std::fs::write(out.join("model.safetensors"), bytes).unwrap();
    out
}

/// Fidelity of the model at `path` against a fixture form's serial reference.
pub fn fidelity_of(path: &Path, fixture: &str, form: &str) -> Fidelity {
    let mut m = load(path, &LoadOptions { threads: 1 }).unwrap();
    let vocab = m.info().vocab_size;
    let ours = score(m.as_mut(), &tokens(fixture), 1);
    fidelity(&reference(fixture, form, "logits_serial"), &ours, vocab)
}

/// A tensor of a rewritten safetensors file: dtype, shape, bytes.
pub type RawTensor = (String, Vec<u64>, Vec<u8>);

/// Rewrites a copied checkpoint's model.safetensors: `edit` gets every tensor by name and may
/// remove, add or change them; the file is written back in sorted name order.
pub fn rewrite_tensors(
    dir: &Path,
    edit: &dyn Fn(&mut std::collections::BTreeMap<String, RawTensor>),
) {
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let hlen = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + hlen]).unwrap();
    let data = &bytes[8 + hlen..];
    let mut tensors = std::collections::BTreeMap::new();
    for (name, t) in header.as_object().unwrap() {
        if name == "__metadata__" {
            continue;
        }
        let off = t["data_offsets"].as_array().unwrap();
        let (a, b) = (
            off[0].as_u64().unwrap() as usize,
            off[1].as_u64().unwrap() as usize,
        );
        let shape = t["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        let dtype = t["dtype"].as_str().unwrap().to_string();
        tensors.insert(name.clone(), (dtype, shape, data[a..b].to_vec()));
    }
    edit(&mut tensors);
    let mut head = serde_json::Map::new();
    head.insert("__metadata__".into(), serde_json::json!({"format": "mlx"}));
    let mut body = Vec::new();
    for (name, (dtype, shape, b)) in &tensors {
        head.insert(
            name.clone(),
            serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [body.len(), body.len() + b.len()]}),
        );
        body.extend_from_slice(b);
    }
    let mut h = serde_json::Value::Object(head).to_string().into_bytes();
    while h.len() % 8 != 0 {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&h);
    out.extend_from_slice(&body);
    std::fs::write(path, out).unwrap();
}
