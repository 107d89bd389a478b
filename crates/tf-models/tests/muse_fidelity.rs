//! Muse Spark held against mlx-lm, teacher-forced on the committed fixtures
//! (fixtures/muse_spark, written by scripts/fixtures/gen_muse_spark.py).
//!
//! Two bars, both derived from the reference file at run time (no measured numbers in source):
//! - the DESIGN bar: our worst KL from the float32 reference (mlx-lm with its two forced bf16
//!   casts removed) is no larger than the stock mlx-lm run's KL from it;
//! - a tight bar: same top-1 everywhere, and the largest logit difference within
//!   `SPREAD_FACTOR` times mlx-lm's own one-call vs token-by-token spread.
//!
//! Planted controls (a wrong window, a wrong NoPE layer, the stock bf16 run, shifted positions,
//! the 4-bit weights against the f32 reference) must fail the tight bar.
mod muse_common;
use muse_common::*;
use std::path::Path;

/// How many times mlx-lm's own full-vs-stepwise logit spread our logits may differ by.
const SPREAD_FACTOR: f64 = 16.0;

fn ours(path: &Path) -> Vec<Vec<f32>> {
    let refs = Refs::open();
    let mut m = model(path, 2);
    refs.tokens()
        .iter()
        .map(|t| run_chunked(m.as_mut(), t, t.len()))
        .collect()
}

fn compare(ours: &[Vec<f32>], reference: &str) -> Distance {
    let refs = Refs::open();
    let ds: Vec<Distance> = ours
        .iter()
        .zip(refs.logits(reference))
        .map(|(o, r)| distance(o, &r, 256))
        .collect();
    worst(&ds)
}

struct Bars {
    design_kl: f64,
    spread: f64,
}

fn bars(weights: &str) -> Bars {
    let stock = compare(
        &Refs::open().logits(&format!("logits_{weights}_stock")),
        &format!("logits_{weights}_nocast"),
    );
    let step = compare(
        &Refs::open().logits("logits_f32_nocast_stepwise"),
        "logits_f32_nocast",
    );
    assert!(step.max_abs > 0.0, "the reference's own spread is zero");
    Bars {
        design_kl: stock.kl_max,
        spread: SPREAD_FACTOR * step.max_abs,
    }
}

fn passes_tight(d: &Distance, b: &Bars) -> bool {
    d.top1 == 1.0 && d.max_abs <= b.spread && d.kl_max <= b.design_kl
}

fn check(path: &str, weights: &str) -> Distance {
    let d = compare(&ours(&fixture(path)), &format!("logits_{weights}_nocast"));
    let b = bars(weights);
    eprintln!(
        "{path} vs {weights}_nocast: {d:?}; bars: kl <= {:.3e}, |dlogit| <= {:.3e}",
        b.design_kl, b.spread
    );
    assert!(
        d.kl_max <= b.design_kl,
        "{path}: fails the DESIGN bar: {d:?}"
    );
    assert!(passes_tight(&d, &b), "{path}: fails the tight bar: {d:?}");
    d
}

#[test]
fn hf_f32_matches_reference() {
    check("hf-f32", "f32");
}

#[test]
fn mlx_f32_matches_reference() {
    check("mlx-f32", "f32");
}

#[test]
fn mlx_4bit_matches_reference() {
    check("mlx-4bit", "q4");
}

#[test]
fn both_forms_agree_closely() {
    let (hf, mlx) = (ours(&fixture("hf-f32")), ours(&fixture("mlx-f32")));
    let ds: Vec<Distance> = hf
        .iter()
        .zip(&mlx)
        .map(|(a, b)| distance(a, b, 256))
        .collect();
    let d = worst(&ds);
    eprintln!("hf-f32 vs mlx-f32 (ours): {d:?}");
    // They differ only in the residual-gate coefficients (computed vs stored, ulps apart).
    assert!(passes_tight(&d, &bars("f32")), "{d:?}");
}

/// Copies a fixture to a temporary directory with its text config edited.
fn tampered(path: &str, edit: impl Fn(&mut serde_json::Value)) -> tempdir::Dir {
    let dir = tempdir::Dir::new(path);
    let src = fixture(path);
    std::fs::copy(
        src.join("model.safetensors"),
        dir.0.join("model.safetensors"),
    )
    .unwrap();
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    edit(&mut cfg["text_config"]);
    std::fs::write(dir.0.join("config.json"), cfg.to_string()).unwrap();
    dir
}

mod tempdir {
    /// A directory removed on drop.
    pub struct Dir(pub std::path::PathBuf);
    impl Dir {
        pub fn new(tag: &str) -> Dir {
            let p = std::env::temp_dir().join(format!(
                "tf-muse-{tag}-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            std::fs::create_dir_all(&p).unwrap();
            Dir(p)
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn assert_caught(name: &str, d: Distance, weights: &str) {
    eprintln!("planted {name}: {d:?}");
    assert!(
        !passes_tight(&d, &bars(weights)),
        "planted control {name} passed the bar: {d:?}"
    );
}

#[test]
fn planted_wrong_window_is_caught() {
    let dir = tampered("mlx-f32", |t| t["sliding_window"] = 9.into());
    assert_caught(
        "window 9",
        compare(&ours(&dir.0), "logits_f32_nocast"),
        "f32",
    );
}

#[test]
fn planted_wrong_nope_layer_is_caught() {
    let dir = tampered("mlx-f32", |t| t["layer_rope_theta"][1] = 10000.0.into());
    assert_caught(
        "rope on layer 1",
        compare(&ours(&dir.0), "logits_f32_nocast"),
        "f32",
    );
}

#[test]
fn planted_stock_bf16_run_and_shift_and_wrong_weights_are_caught() {
    let refs = Refs::open();
    assert_caught(
        "stock bf16 reference as ours",
        compare(&refs.logits("logits_f32_stock"), "logits_f32_nocast"),
        "f32",
    );
    let mut shifted = ours(&fixture("mlx-f32"));
    for s in &mut shifted {
        s.rotate_left(256);
    }
    assert_caught(
        "positions shifted by one",
        compare(&shifted, "logits_f32_nocast"),
        "f32",
    );
    assert_caught(
        "4-bit weights vs f32 reference",
        compare(&ours(&fixture("mlx-4bit")), "logits_f32_nocast"),
        "f32",
    );
}
