//! `tensorfold receipts concurrency` end to end: the binary starts its own server with the real
//! model and must report concurrent == solo for every request; with the planted crosstalk (a
//! hidden flag mixing streams' logits within a round) the same receipt must fail with exit 1.

use std::path::PathBuf;
use std::process::Command;

use tf_testkit::default_model;

fn receipt(model: &PathBuf, extra: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tensorfold"))
        .args(["receipts", "concurrency"])
        .arg(model)
        .args(extra)
        .output()
        .expect("run tensorfold");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    (out.status.code(), stdout)
}

#[test]
fn concurrent_equals_solo_and_the_planted_crosstalk_is_caught() {
    let Some(model) = default_model() else { return };
    let (code, out) = receipt(&model, &["--max-tokens", "16"]);
    assert_eq!(code, Some(0), "{out}");
    // 4 combinations (chat/raw x greedy/seeded) x (1 + 2 + 4 + 8) requests.
    assert!(out.contains("concurrent == solo: 60/60"), "{out}");
    assert!(!out.contains("MISMATCH"), "{out}");

    let (code, out) = receipt(
        &model,
        &[
            "--max-tokens",
            "16",
            "--streams",
            "2",
            "--planted-crosstalk",
        ],
    );
    assert_eq!(code, Some(1), "the planted crosstalk went unnoticed: {out}");
    assert!(out.contains("MISMATCH"), "{out}");
    assert!(!out.contains("concurrent == solo: 8/8"), "{out}");
}
