//! Every Nemotron-H fixture (f32 HF and MLX forms, MLX 4- and 6-bit, Puzzle) scored against
//! mlx-lm's float32 reference logits (one call, token by token, chunks of 5), with planted
//! changes that the same thresholds must reject.

mod nemotron_support;

use nemotron_support::{
    dir, fidelity, fidelity_of, model, mutated, passes, reference, score, tokens, FIXTURES, MAX_KL,
    MAX_REL,
};
use serde_json::Value;

#[test]
fn every_fixture_matches_mlx_lm_at_float_rounding_level() {
    for (fx, forms) in FIXTURES {
        let toks = tokens(fx);
        for form in *forms {
            let mut m = model(fx, form, 2);
            let vocab = m.info().vocab_size;
            let ours = score(m.as_mut(), &toks, 1);
            for r in ["logits_full", "logits_serial", "logits_chunk5"] {
                let f = fidelity(&reference(fx, form, r), &ours, vocab);
                eprintln!("{fx}/{form} vs {r}: {f:?}");
                assert!(
                    passes(&f),
                    "{fx}/{form} vs {r}: {f:?} (bar: top-1 1.0, rel <= {MAX_REL:e}, KL <= {MAX_KL:e})"
                );
            }
        }
    }
}

#[test]
fn an_unchanged_copy_passes() {
    // The control of the controls: the mutation path itself changes nothing.
    let p = mutated("latent_grouped", "f32_hf", "identity", &|_| {}, &[]);
    let f = fidelity_of(&p, "latent_grouped", "f32_hf");
    assert!(passes(&f), "{f:?}");
    let _ = std::fs::remove_dir_all(p);
}

/// Asserts that a mutated copy fails the bar; returns its fidelity.
fn must_fail(
    fixture: &str,
    form: &str,
    tag: &str,
    edit: &dyn Fn(&mut Value),
    tensors: &[(&str, f32, f32)],
) -> nemotron_support::Fidelity {
    let p = mutated(fixture, form, tag, edit, tensors);
    let f = fidelity_of(&p, fixture, form);
    eprintln!("planted {tag} on {fixture}/{form}: {f:?}");
    assert!(!passes(&f), "planted change {tag} was not caught: {f:?}");
    let _ = std::fs::remove_dir_all(p);
    f
}

#[test]
fn planted_gate_bias_ignored_fails() {
    let none = |_: &mut Value| {};
    for layer in [2, 5] {
        let t = format!("backbone.layers.{layer}.mixer.gate.e_score_correction_bias");
        must_fail(
            "latent_grouped",
            "f32_hf",
            &format!("nobias{layer}"),
            &none,
            &[(&t, 0.0, 0.0)],
        );
    }
    must_fail(
        "plain_moe",
        "f32_hf",
        "nobias",
        &none,
        &[(
            "backbone.layers.1.mixer.gate.e_score_correction_bias",
            0.0,
            0.0,
        )],
    );
}

#[test]
fn planted_routing_config_changes_fail() {
    must_fail(
        "latent_grouped",
        "f32_hf",
        "noscale",
        &|c| {
            c["routed_scaling_factor"] = 1.0.into();
        },
        &[],
    );
    must_fail(
        "latent_grouped",
        "f32_hf",
        "nogroups",
        &|c| {
            c["n_group"] = 1.into();
            c["topk_group"] = 1.into();
        },
        &[],
    );
    must_fail(
        "latent_grouped",
        "f32_hf",
        "nonorm",
        &|c| {
            c["norm_topk_prob"] = false.into();
        },
        &[],
    );
    // Puzzle: layer 3's own top-k (3) replaced by the global one (2).
    must_fail(
        "puzzle",
        "f32_hf",
        "globaltopk",
        &|c| {
            c["block_configs"][3]
                .as_object_mut()
                .unwrap()
                .remove("num_experts_per_tok");
        },
        &[],
    );
}

#[test]
fn planted_mamba_changes_fail() {
    // time_step_limit ignored (plain_moe clamps dt to [0.05, 0.8]).
    must_fail(
        "plain_moe",
        "f32_hf",
        "noclamp",
        &|c| {
            c.as_object_mut().unwrap().remove("time_step_limit");
        },
        &[],
    );
    // dt_bias ignored in the first Mamba layer.
    must_fail(
        "latent_grouped",
        "f32_hf",
        "nodtbias",
        &|_| {},
        &[("backbone.layers.0.mixer.dt_bias", 0.0, 0.0)],
    );
    // The gated norm with one group instead of n_groups cannot be planted through weights; a
    // 0.1% change of its gain must already fail the bar.
    must_fail(
        "latent_grouped",
        "f32_hf",
        "gatednorm",
        &|_| {},
        &[("backbone.layers.3.mixer.norm.weight", 1.001, 0.0)],
    );
}

#[test]
fn the_bar_resolves_small_perturbations() {
    // A block norm scaled by 1 + 1e-4: far below anything a semantic slip produces, yet
    // outside the float-rounding bar.
    let f = must_fail(
        "latent_grouped",
        "f32_hf",
        "norm1e-4",
        &|_| {},
        &[("backbone.layers.0.norm.weight", 1.0001, 0.0)],
    );
    assert!(f.rel > MAX_REL);
    assert!(dir("latent_grouped", "f32_hf").exists());
}
