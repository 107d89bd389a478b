//! `pull` and `resolve_model_in` against a fake hub on 127.0.0.1 (no external network).

mod fake_hub;

use std::fs;
use std::path::Path;

use tf_hub::{pull, pulled_snapshot, resolve_model_in, HubError, PullOptions};

const MAIN: &str = "1111111111111111111111111111111111111111";
const V1: &str = "2222222222222222222222222222222222222222";
const GGUF_COMMIT: &str = "3333333333333333333333333333333333333333";

/// Deterministic bytes standing in for weights, large enough to cross buffer sizes.
fn weights(seed: u32, len: usize) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(2654435761).wrapping_add(seed) >> 13) as u8)
        .collect()
}

fn hub() -> fake_hub::Running {
    let mut hub = fake_hub::Hub::default();
    let w_main = weights(1, 300_000);
    let w_v1 = weights(2, 1_000);
    hub.add(
        "acme/tiny",
        "main",
        MAIN,
        &[
            ("README.md", b"# tiny"),
            (
                "config.json",
                b"{\"model_type\":\"llama\",\"rev\":\"main\"}",
            ),
            ("tokenizer.json", b"{\"model\":{}}"),
            ("model.safetensors", &w_main),
            ("onnx/model.onnx", b"onnx"),
        ],
    );
    hub.add(
        "acme/tiny",
        "v1",
        V1,
        &[
            ("config.json", b"{\"model_type\":\"llama\",\"rev\":\"v1\"}"),
            ("model.safetensors", &w_v1),
        ],
    );
    hub.add(
        "acme/tiny-gguf",
        "main",
        GGUF_COMMIT,
        &[
            ("tiny.Q8_0.gguf", b"GGUF q8"),
            ("tiny.Q4_K_M.gguf", b"GGUF q4km"),
        ],
    );
    fake_hub::start(hub)
}

fn opts(endpoint: &str, home: &Path) -> PullOptions {
    PullOptions {
        endpoint: Some(endpoint.into()),
        token: None,
        include: None,
        home: Some(home.to_path_buf()),
        progress: false,
    }
}

#[test]
fn pulls_config_tokenizer_and_weights_then_reuses_the_cache() {
    let server = hub();
    let home = tempfile::tempdir().unwrap();
    let o = PullOptions {
        progress: true, // exercises the plain-line path (stderr is not a terminal here)
        ..opts(&server.endpoint, home.path())
    };
    let dir = pull("acme/tiny", None, &o).unwrap();
    assert!(
        dir.ends_with(format!("hub/models--acme--tiny/snapshots/{MAIN}")),
        "{dir:?}"
    );
    assert_eq!(
        fs::read(dir.join("model.safetensors")).unwrap(),
        weights(1, 300_000)
    );
    assert_eq!(
        fs::read(dir.join("config.json")).unwrap(),
        b"{\"model_type\":\"llama\",\"rev\":\"main\"}"
    );
    assert_eq!(
        fs::read(dir.join("tokenizer.json")).unwrap(),
        b"{\"model\":{}}"
    );
    assert!(!dir.join("README.md").exists());
    assert!(!dir.join("onnx").exists());
    assert!(server.requests_with("README").is_empty());

    assert_eq!(
        pulled_snapshot(home.path(), "acme/tiny", "main"),
        Some(dir.clone())
    );
    assert_eq!(
        resolve_model_in(Some("acme/tiny"), home.path(), false).unwrap(),
        dir
    );

    // A second pull only asks for the listing: every file is already cached.
    let resolves = server.requests_with("/resolve/").len();
    assert_eq!(pull("acme/tiny", None, &o).unwrap(), dir);
    assert_eq!(server.requests_with("/resolve/").len(), resolves);
}

#[test]
fn pinned_revision_is_honoured() {
    let server = hub();
    let home = tempfile::tempdir().unwrap();
    let o = opts(&server.endpoint, home.path());
    let dir = pull("acme/tiny", Some("v1"), &o).unwrap();
    assert!(dir.ends_with(V1), "{dir:?}");
    assert_eq!(
        fs::read(dir.join("config.json")).unwrap(),
        b"{\"model_type\":\"llama\",\"rev\":\"v1\"}"
    );
    assert_eq!(
        fs::read(dir.join("model.safetensors")).unwrap(),
        weights(2, 1_000)
    );
    assert!(!server.requests_with("/revision/v1").is_empty());

    assert_eq!(
        resolve_model_in(Some("acme/tiny@v1"), home.path(), false).unwrap(),
        dir
    );
    // main was never pulled: resolving it must not find v1's snapshot.
    let err = resolve_model_in(Some("acme/tiny"), home.path(), false).unwrap_err();
    assert!(matches!(err, HubError::NotPulled { .. }), "{err}");
    assert!(
        err.to_string().contains("tensorfold pull acme/tiny"),
        "{err}"
    );
}

#[test]
fn missing_repo_and_revision_are_named() {
    let server = hub();
    let home = tempfile::tempdir().unwrap();
    let o = opts(&server.endpoint, home.path());
    let err = pull("acme/nope", None, &o).unwrap_err();
    assert!(
        matches!(err, HubError::RepoNotFound { ref repo, .. } if repo == "acme/nope"),
        "{err}"
    );
    let err = pull("acme/tiny", Some("v9"), &o).unwrap_err();
    assert!(matches!(err, HubError::RevisionNotFound { .. }), "{err}");
    let err = pull("not-a-repo", None, &o).unwrap_err();
    assert!(matches!(err, HubError::InvalidRepoId { .. }), "{err}");
    assert!(pulled_snapshot(home.path(), "acme/nope", "main").is_none());
}

#[test]
fn several_ggufs_need_include() {
    let server = hub();
    let home = tempfile::tempdir().unwrap();
    let o = opts(&server.endpoint, home.path());
    let err = pull("acme/tiny-gguf", None, &o).unwrap_err();
    assert!(matches!(err, HubError::AmbiguousGguf { .. }), "{err}");
    assert!(server.requests_with("/resolve/").is_empty());

    let o = PullOptions {
        include: Some("*Q4_K_M*".into()),
        ..o
    };
    let dir = pull("acme/tiny-gguf", None, &o).unwrap();
    assert_eq!(
        fs::read(dir.join("tiny.Q4_K_M.gguf")).unwrap(),
        b"GGUF q4km"
    );
    assert!(!dir.join("tiny.Q8_0.gguf").exists());
}

#[test]
fn unreachable_hub_is_a_network_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port(); // the listener is dropped: nothing listens there now
    let home = tempfile::tempdir().unwrap();
    let o = opts(&format!("http://127.0.0.1:{port}"), home.path());
    let err = pull("acme/tiny", None, &o).unwrap_err();
    assert!(matches!(err, HubError::Network { .. }), "{err}");
}

#[test]
fn resolve_local_paths_and_unknown_arguments() {
    let home = tempfile::tempdir().unwrap();
    let file = home.path().join("m.gguf");
    fs::write(&file, b"GGUF").unwrap();
    let arg = file.to_str().unwrap();
    assert_eq!(
        resolve_model_in(Some(arg), home.path(), false).unwrap(),
        file
    );
    let dir = home.path().to_str().unwrap();
    assert_eq!(
        resolve_model_in(Some(dir), home.path(), false).unwrap(),
        home.path()
    );

    let err = resolve_model_in(Some("no-such-model.gguf"), home.path(), false).unwrap_err();
    assert!(matches!(err, HubError::ModelNotFound { .. }), "{err}");
    let err = resolve_model_in(Some("someone/model@dev"), home.path(), false).unwrap_err();
    assert!(
        err.to_string()
            .contains("tensorfold pull someone/model@dev"),
        "{err}"
    );
}
