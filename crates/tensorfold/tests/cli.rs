//! The binary as a user runs it: info (summaries and refusals), models, run, score.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn tensorfold(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tensorfold"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

/// The real default model's path as a string (tf_testkit::default_model).
fn default_model() -> Option<String> {
    tf_testkit::default_model().map(|p| p.display().to_string())
}

#[test]
fn info_summarises_the_default_gguf() {
    let Some(model) = default_model() else { return };
    let o = tensorfold(&["info", &model]);
    assert!(o.status.success());
    let out = stdout(&o);
    for want in [
        "llama",
        "30 attention+mlp",
        "vocabulary 49152",
        "Q4_1",
        "Q8_0",
        "F32",
        "tied",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
}

#[test]
fn info_lists_puzzle_experts_per_layer() {
    let dir = repo("fixtures/nemotron_h/puzzle/f32_hf");
    let o = tensorfold(&["info", dir.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let moe: Vec<(u64, u64)> = v["moe_layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["experts"].as_u64().unwrap(), m["top_k"].as_u64().unwrap()))
        .collect();
    assert_eq!(moe, vec![(6, 2), (10, 3), (4, 1)]);
    assert_eq!(v["family"], "nemotron_h_puzzle");
}

/// A copy of the puzzle fixture whose smallest MoE layer asks for more experts than it has:
/// refused by name with exit status 2; the unmodified copy (the control) is accepted.
#[test]
fn info_refuses_a_layer_whose_top_k_exceeds_its_experts() {
    let src = repo("fixtures/nemotron_h/puzzle/f32_hf");
    let tmp = tempfile::tempdir().unwrap();
    std::fs::copy(
        src.join("model.safetensors"),
        tmp.path().join("model.safetensors"),
    )
    .unwrap();
    let config = std::fs::read_to_string(src.join("config.json")).unwrap();
    std::fs::write(tmp.path().join("config.json"), &config).unwrap();
    let dir = tmp.path().to_str().unwrap();
    assert!(tensorfold(&["info", dir]).status.success());

    let mut c: serde_json::Value = serde_json::from_str(&config).unwrap();
    c["block_configs"][6]["num_experts_per_tok"] = 5.into();
    std::fs::write(tmp.path().join("config.json"), c.to_string()).unwrap();
    let o = tensorfold(&["info", dir]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("TopKExceedsExperts"), "{err}");
}

#[test]
fn models_lists_every_family() {
    let out = stdout(&tensorfold(&["models"]));
    for f in ["llama", "nemotron_h", "nemotron_h_puzzle", "muse_spark"] {
        assert!(out.contains(f), "{f} missing:\n{out}");
    }
}

#[test]
fn run_raw_greedy_continues_the_capital_of_france() {
    let Some(model) = default_model() else { return };
    let o = tensorfold(&[
        "run",
        &model,
        "--raw",
        "--prompt",
        "The capital of France is",
        "--temperature",
        "0",
        "--max-tokens",
        "8",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = stdout(&o);
    let last: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(
        last["prompt_ids"],
        serde_json::json!([504, 3575, 282, 4649, 314])
    );
    assert!(
        last["text"].as_str().unwrap().starts_with(" Paris.\n\nThe"),
        "{out}"
    );
    assert!(out.starts_with(" Paris.\n\nThe"), "streamed text: {out:?}");
}

#[test]
fn bad_inputs_get_clear_errors() {
    let Some(model) = default_model() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let ids = tmp.path().join("ids.json");
    let out = tmp.path().join("out.safetensors");
    std::fs::write(&ids, "[1, 2, 49152]").unwrap();
    let o = tensorfold(&[
        "score",
        &model,
        "--tokens",
        ids.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("out of range"));

    let o = tensorfold(&["run", &model, "--raw", "--prompt", ""]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("empty"));

    let o = tensorfold(&["info", "/nonexistent/model.gguf"]);
    assert!(!o.status.success());
}

#[test]
fn score_modes_write_identical_logits() {
    let Some(model) = default_model() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let ids = tmp.path().join("ids.json");
    std::fs::write(&ids, "[504, 3575, 282, 4649, 314, 7042, 30, 198, 198]").unwrap();
    let mut files = Vec::new();
    for mode in ["full", "serial", "chunk:4"] {
        let out = tmp
            .path()
            .join(format!("{}.safetensors", mode.replace(':', "_")));
        let o = tensorfold(&[
            "score",
            &model,
            "--tokens",
            ids.to_str().unwrap(),
            "--mode",
            mode,
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        files.push(std::fs::read(out).unwrap());
    }
    assert!(
        files[0].len() > 9 * 49152 * 4,
        "all of logits [9, 49152] f32 is there"
    );
    assert!(files[0] == files[1] && files[1] == files[2]);
}

#[test]
fn backend_cuda_without_a_gpu_is_refused_with_status_2() {
    if Path::new("/proc/driver/nvidia").exists() {
        eprintln!(
            "note: this machine has an NVIDIA driver; the no-GPU refusal is not testable here"
        );
        return;
    }
    let Some(model) = default_model() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = dir.path().join("tokens.json");
    std::fs::write(&tokens, "[504, 3575]").expect("write tokens");
    let tokens = tokens.to_string_lossy().into_owned();
    let out = dir.path().join("logits.safetensors");
    let out = out.to_string_lossy().into_owned();
    for cmd in [
        vec![
            "run",
            &model,
            "--backend",
            "cuda",
            "--raw",
            "--prompt",
            "Hi",
            "--max-tokens",
            "1",
        ],
        vec!["bench", &model, "--backend", "cuda", "--prompt-tokens", "4"],
        vec![
            "score",
            &model,
            "--backend",
            "cuda",
            "--tokens",
            &tokens,
            "--out",
            &out,
        ],
        vec!["serve", &model, "--backend", "cuda", "--port", "0"],
    ] {
        let o = tensorfold(&cmd);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{cmd:?}: {err}");
        assert!(err.contains("no CUDA driver"), "{cmd:?}: {err}");
    }
    // Control: the same run on the CPU (and with the default, auto) succeeds.
    for backend in ["cpu", "auto"] {
        let o = tensorfold(&[
            "run",
            &model,
            "--backend",
            backend,
            "--raw",
            "--prompt",
            "Hi",
            "--max-tokens",
            "1",
        ]);
        assert!(
            o.status.success(),
            "{backend}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}
