//! The official `openai` Python SDK against `tensorfold serve` (scripts/openai_sdk_check.py):
//! chat, streaming, completions, seeds, a tool-call round trip, an error case. Skipped with a
//! note when python3 or the `openai` package is absent (unless TENSORFOLD_REQUIRE_OPENAI is
//! set), or when the model is absent (unless TENSORFOLD_REQUIRE_MODEL is set).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use tf_testkit::default_model;

fn have_openai() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import openai"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok || std::env::var_os("TENSORFOLD_REQUIRE_OPENAI").is_none(),
        "TENSORFOLD_REQUIRE_OPENAI is set but `import openai` fails (pip install openai)"
    );
    if !ok {
        eprintln!("note: python3 with the openai package not found; skipping");
    }
    ok
}

/// Kills the server when the test ends, however it ends.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_official_openai_sdk_works_against_serve() {
    let Some(model) = default_model() else { return };
    if !have_openai() {
        return;
    }
    let mut server = Child(
        Command::new(env!("CARGO_BIN_EXE_tensorfold"))
            .arg("serve")
            .arg(&model)
            .args(["--port", "0", "--api-key", "sdk-key"])
            .stderr(Stdio::piped())
            .spawn()
            .expect("start tensorfold serve"),
    );
    let stderr = server.0.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let addr = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|l| {
            l.strip_prefix("serving on http://")
                .and_then(|r| r.split_whitespace().next())
                .map(String::from)
        })
        .expect("the server prints its address");
    // Keep draining the server's log so it never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scripts/openai_sdk_check.py"
    );
    let out = Command::new("python3")
        .arg(script)
        .args([
            "--base-url",
            &format!("http://{addr}/v1"),
            "--api-key",
            "sdk-key",
        ])
        .output()
        .expect("run the SDK script");
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    assert!(text.contains("all checks passed"), "{text}");
}
