//! The live one-line throughput display (a terminal) or nothing (logs are per request).

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tf_engine::scheduler::SchedulerHandle;

/// Redraws one status line on stderr every second until `stop` is set; does nothing when
/// stderr is not a terminal.
pub fn spawn(sched: SchedulerHandle, stop: Arc<AtomicBool>) -> Option<std::thread::JoinHandle<()>> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    std::thread::Builder::new()
        .name("tf-display".into())
        .spawn(move || {
            let mut last = sched.snapshot();
            let mut at = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_secs(1));
                let now = sched.snapshot();
                let dt = at.elapsed().as_secs_f64().max(1e-9);
                let line = format!(
                    "running {} waiting {} | prefill {:.0} tok/s | decode {:.0} tok/s | requests {} | kv {} MiB",
                    now.running,
                    now.waiting,
                    (now.prompt_tokens - last.prompt_tokens) as f64 / dt,
                    (now.generated_tokens - last.generated_tokens) as f64 / dt,
                    now.requests,
                    now.state_bytes >> 20,
                );
                let mut err = std::io::stderr().lock();
                let _ = write!(err, "\r\x1b[2K{line}");
                let _ = err.flush();
                last = now;
                at = Instant::now();
            }
            let _ = writeln!(std::io::stderr());
        })
        .ok()
}
