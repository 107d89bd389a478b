//! The family's refusals, exercised on mutated copies of the fixtures: each is refused by name
//! before any weight is used, and the unmutated fixture loads (the control).

mod nemotron_support;

use nemotron_support::{dir, mutated, rewrite_tensors};
use std::path::Path;
use tf_models::{load, LoadOptions, ModelError};

fn refusal_of(path: &Path) -> String {
    match load(path, &LoadOptions { threads: 1 }) {
        Err(ModelError::Refused { refusal }) => {
            eprintln!("{}: {refusal}", refusal.name());
            refusal.name().to_string()
        }
        Err(e) => panic!("expected a named refusal, got {e}"),
        Ok(_) => panic!("{} loaded although mutated", path.display()),
    }
}

#[test]
fn unmutated_fixtures_load() {
    for (fx, form) in [
        ("puzzle", "f32_hf"),
        ("latent_grouped", "q4g64"),
        ("plain_moe", "f32_mlx"),
    ] {
        assert!(
            load(&dir(fx, form), &LoadOptions { threads: 1 }).is_ok(),
            "{fx}/{form}"
        );
    }
}

#[test]
fn a_layer_top_k_above_its_own_expert_count() {
    // Puzzle layer 6 has 4 experts; top-5 there (the global count is 8).
    let p = mutated(
        "puzzle",
        "f32_hf",
        "topk",
        &|c| {
            c["block_configs"][6]["num_experts_per_tok"] = 5.into();
        },
        &[],
    );
    assert_eq!(refusal_of(&p), "TopKExceedsExperts");
    let _ = std::fs::remove_dir_all(p);
}

#[test]
fn a_transposed_latent_projection() {
    let p = mutated("latent_grouped", "f32_hf", "transposed", &|_| {}, &[]);
    rewrite_tensors(&p, &|t| {
        let e = t
            .get_mut("backbone.layers.2.mixer.fc1_latent_proj.weight")
            .unwrap();
        e.1 = vec![e.1[1], e.1[0]];
    });
    assert_eq!(refusal_of(&p), "LatentProjectionTransposed");
    let _ = std::fs::remove_dir_all(p);
}

#[test]
fn a_quantized_latent_projection() {
    // fc1_latent_proj [64, 128] stored as MLX 4-bit group 64: words [64, 16], scales/biases [64, 2].
    let p = mutated("latent_grouped", "q4g64", "quantlatent", &|_| {}, &[]);
    rewrite_tensors(&p, &|t| {
        let m = "backbone.layers.2.mixer.fc1_latent_proj";
        t.remove(&format!("{m}.weight"));
        t.insert(
            format!("{m}.weight"),
            ("U32".into(), vec![64, 16], vec![0; 64 * 16 * 4]),
        );
        t.insert(
            format!("{m}.scales"),
            ("F32".into(), vec![64, 2], vec![0; 64 * 2 * 4]),
        );
        t.insert(
            format!("{m}.biases"),
            ("F32".into(), vec![64, 2], vec![0; 64 * 2 * 4]),
        );
    });
    assert_eq!(refusal_of(&p), "LatentProjectionQuantized");
    let _ = std::fs::remove_dir_all(p);
}

#[test]
fn experts_stored_over_hidden_with_a_latent_size() {
    // latent_grouped's layer 2 experts re-stored over hidden (128) instead of latent (64).
    let p = mutated("latent_grouped", "f32_hf", "overhidden", &|_| {}, &[]);
    rewrite_tensors(&p, &|t| {
        for e in 0..12 {
            let up = t
                .get_mut(&format!(
                    "backbone.layers.2.mixer.experts.{e}.up_proj.weight"
                ))
                .unwrap();
            up.1 = vec![64, 128];
            up.2 = vec![0; 64 * 128 * 4];
            let down = t
                .get_mut(&format!(
                    "backbone.layers.2.mixer.experts.{e}.down_proj.weight"
                ))
                .unwrap();
            down.1 = vec![128, 64];
            down.2 = vec![0; 64 * 128 * 4];
        }
    });
    assert_eq!(refusal_of(&p), "RoutedExpertsOverHidden");
    let _ = std::fs::remove_dir_all(p);
}

#[test]
fn a_latent_size_without_latent_projections() {
    let p = mutated(
        "plain_moe",
        "f32_hf",
        "nolatent",
        &|c| {
            c["moe_latent_size"] = 32.into();
        },
        &[],
    );
    assert_eq!(refusal_of(&p), "LatentProjectionMissing");
    let _ = std::fs::remove_dir_all(p);
}
