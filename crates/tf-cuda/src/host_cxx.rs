//! Test support: the host C++ compiler that the kernel emulation tests build the CUDA sources
//! with (`$CXX`, else `c++`).

use std::process::Command;

/// The compiler, or None (the caller skips, and this says so) — unless `TF_CUDA_REQUIRE_CXX`
/// is set, when a missing compiler fails the test.
pub(crate) fn compiler() -> Option<String> {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let runs = Command::new(&cxx)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if runs {
        return Some(cxx);
    }
    assert!(
        std::env::var_os("TF_CUDA_REQUIRE_CXX").is_none(),
        "TF_CUDA_REQUIRE_CXX is set but no C++ compiler runs"
    );
    eprintln!("skipped: no C++ compiler ($CXX or c++)");
    None
}
