//! `tensorfold receipts resume` end to end with short replies: the binary starts a server with
//! the prompt cache and one without on the real model, and every turn must be equal (and later
//! turns must have resumed something); with the planted stale cache (prefixes matched by
//! length, ignoring tokens) the same receipt must fail with exit 1.

use std::path::PathBuf;
use std::process::Command;

use tf_testkit::default_model;

fn receipt(model: &PathBuf, extra: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tensorfold"))
        .args(["receipts", "resume"])
        .arg(model)
        .args(["--turns", "2", "--max-tokens", "6"])
        .args(extra)
        .output()
        .expect("run tensorfold");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    (out.status.code(), stdout)
}

#[test]
fn resumed_equals_fresh_and_the_planted_stale_cache_is_caught() {
    let Some(model) = default_model() else { return };
    let (code, out) = receipt(&model, &[]);
    assert_eq!(code, Some(0), "{out}");
    // 2 plain + 2 tool conversations (the default model's template takes tools) x 2 turns.
    assert!(out.contains("resumed == fresh: 8/8"), "{out}");
    let resumed: usize = out
        .lines()
        .find_map(|l| l.strip_prefix("turns that resumed a cached prefix: "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    assert!(resumed >= 4, "every second turn resumes a prefix: {out}");

    let (code, out) = receipt(&model, &["--planted-stale-cache"]);
    assert_eq!(
        code,
        Some(1),
        "the planted stale cache must fail the receipt: {out}"
    );
    assert!(out.contains("MISMATCH"), "{out}");
}
