//! `tensorfold receipts drafts` end to end with short replies: the binary starts a server on
//! the real model and every prompt, greedy and seeded, must give the same tokens drafted and
//! with `"draft": false` (and the repetitive prompt must have drafted something); with the
//! planted unverified draft (the first drafted token kept without checking it) the same
//! receipt must fail with exit 1.

use std::path::PathBuf;
use std::process::Command;

use tf_testkit::default_model;

fn receipt(model: &PathBuf, extra: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tensorfold"))
        .args(["receipts", "drafts"])
        .arg(model)
        .args(["--max-tokens", "20"])
        .args(extra)
        .output()
        .expect("run tensorfold");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    (out.status.code(), stdout)
}

#[test]
fn drafted_equals_plain_and_the_planted_unverified_draft_is_caught() {
    let Some(model) = default_model() else { return };
    let (code, out) = receipt(&model, &[]);
    assert_eq!(code, Some(0), "{out}");
    // 3 prompts x greedy/seeded.
    assert!(out.contains("drafted == plain: 6/6"), "{out}");
    let drafted = out
        .lines()
        .filter(|l| l.starts_with("repetitive"))
        .filter_map(|l| l.split_whitespace().nth(4)?.parse::<f64>().ok())
        .any(|tok_per_fwd| tok_per_fwd > 1.0);
    assert!(
        drafted,
        "the repetitive prompt kept no drafted token: {out}"
    );

    let (code, out) = receipt(&model, &["--planted-unverified-drafts"]);
    assert_eq!(
        code,
        Some(1),
        "the planted unverified draft must fail the receipt: {out}"
    );
    assert!(out.contains("MISMATCH"), "{out}");
}
