//! A step's timeline read from inside its kernels. With `TF_CUDA_TIMELINE=1` the program is
//! built with `TF_TIMELINE` (kernels/common.cuh): the first thread of each launch stamps the
//! GPU's global timer before and after its wait in `tf_follow`, with its kernel's name. A
//! kernel's wait is released when the kernels before it have finished, so from one release to
//! the next is the time a kernel held the step's path. A kernel may also mark phases inside it
//! (`tf_mark`: its first thread stamps the timer under a name starting `~`), which split its
//! time on the path; the table counts a phase's marks as its launches. For measuring only: the
//! stamps cost an atomic and a few stores a launch (a mark, the stores), and the program is
//! another one (its own cache key).

use crate::device::Gpu;
use crate::error::{drv, CudaError, Result};
use std::collections::HashMap;
use std::fmt::Write;

/// The variable that builds the program with its stamps.
pub const ENV: &str = "TF_CUDA_TIMELINE";

/// Records the program holds (`TF_TIMELINE_CAP`).
const CAP: usize = 32768;

/// Bytes of a record's name (`TF_TIMELINE_NAME`).
const NAME: usize = 48;

/// Bytes of a record: two u64 stamps and the name.
const RECORD: usize = 16 + NAME;

/// Kernels that run beside the path (their own stream), left out of its times.
const BESIDE: [&str; 1] = ["tf_l2_prefetch"];

/// Whether this process's program is built with the stamps.
pub fn on() -> bool {
    std::env::var(ENV).is_ok_and(|v| v == "1")
}

/// One launch: its kernel and the global timer (ns) before and after its wait.
#[derive(Clone, Debug, PartialEq)]
pub struct Stamp {
    pub name: String,
    pub before_ns: u64,
    pub after_ns: u64,
}

impl Gpu {
    /// Empties the timeline (call between steps, after a synchronize).
    pub fn timeline_clear(&self) -> Result<()> {
        let mut n = self
            .module
            .get_global("tf_timeline_n", self.stream())
            .map_err(|_| not_built())?;
        self.stream()
            .memcpy_htod(&[0u8; 4], &mut n)
            .map_err(drv("clearing the timeline"))
    }

    /// The launches stamped since [`Gpu::timeline_clear`], in the order of their releases
    /// (synchronizes).
    pub fn timeline(&self) -> Result<Vec<Stamp>> {
        self.synchronize()?;
        let n = self.global_bytes("tf_timeline_n", 4)?;
        let n = u32::from_le_bytes([n[0], n[1], n[2], n[3]]) as usize;
        if n > CAP {
            return Err(CudaError::Shape {
                op: "timeline",
                detail: format!("{n} launches stamped, more than the {CAP} the program holds"),
            });
        }
        Ok(parse(&self.global_bytes("tf_timeline", n * RECORD)?))
    }

    /// The first `len` bytes of the program's global `name` (synchronizes).
    fn global_bytes(&self, name: &str, len: usize) -> Result<Vec<u8>> {
        let s = self.stream();
        let g = self.module.get_global(name, s).map_err(|_| not_built())?;
        if len == 0 {
            return Ok(Vec::new());
        }
        let bytes = s
            .clone_dtoh(&g.slice(..len.min(g.len())))
            .map_err(drv("reading the timeline"))?;
        self.synchronize()?;
        Ok(bytes)
    }
}

fn not_built() -> CudaError {
    CudaError::Shape {
        op: "timeline",
        detail: format!("the program has no stamps: set {ENV}=1 before opening the GPU"),
    }
}

/// Stamps from the program's records, sorted by release (records a launch kept for phases it
/// did not mark have no name, and are left out).
fn parse(bytes: &[u8]) -> Vec<Stamp> {
    let u64_at = |r: &[u8], at: usize| u64::from_le_bytes(r[at..at + 8].try_into().unwrap());
    let mut stamps: Vec<Stamp> = bytes
        .chunks_exact(RECORD)
        .map(|r| {
            let name = &r[16..];
            let len = name.iter().position(|&b| b == 0).unwrap_or(NAME);
            Stamp {
                name: String::from_utf8_lossy(&name[..len]).into_owned(),
                before_ns: u64_at(r, 0),
                after_ns: u64_at(r, 8),
            }
        })
        .filter(|s| !s.name.is_empty())
        .collect();
    stamps.sort_by_key(|s| s.after_ns);
    stamps
}

/// A kernel's sums over the steps read.
#[derive(Default)]
struct Sums {
    launches: usize,
    /// Release to the next release, and how many launches had a next.
    held_ns: u64,
    holding: usize,
    wait_ns: u64,
    /// From the release before to this launch's first stamp, and how many launches had one.
    lag_ns: i64,
    lagged: usize,
}

/// A markdown table of where the steps' time went, by kernel: launches a step; µs a step it
/// held the path (its release to the next release; a step's last launch holds none); their
/// share of the step's span (the first stamp to the last release); µs a launch it held the
/// path, and waited; µs
/// from the release before to its first stamp (how early its blocks were resident). `steps`:
/// each step's stamps, as [`Gpu::timeline`] reads them.
pub fn table(steps: &[Vec<Stamp>]) -> String {
    let mut by: HashMap<&str, Sums> = HashMap::new();
    let (mut span_ns, mut beside) = (0u64, 0usize);
    for step in steps {
        let path: Vec<&Stamp> = step
            .iter()
            .filter(|s| !BESIDE.contains(&s.name.as_str()))
            .collect();
        beside += step.len() - path.len();
        if let (Some(first), Some(last)) = (path.iter().map(|s| s.before_ns).min(), path.last()) {
            span_ns += last.after_ns - first;
        }
        for (i, s) in path.iter().enumerate() {
            let k = by.entry(&s.name).or_default();
            k.launches += 1;
            k.wait_ns += s.after_ns - s.before_ns;
            if let Some(next) = path.get(i + 1) {
                k.held_ns += next.after_ns - s.after_ns;
                k.holding += 1;
            }
            if i > 0 {
                k.lag_ns += s.before_ns as i64 - path[i - 1].after_ns as i64;
                k.lagged += 1;
            }
        }
    }
    let n = steps.len().max(1) as f64;
    let us = |ns: f64| ns / 1e3;
    let mut rows: Vec<_> = by.into_iter().collect();
    rows.sort_by(|a, b| b.1.held_ns.cmp(&a.1.held_ns).then(a.0.cmp(b.0)));
    let mut t = String::new();
    let _ = writeln!(
        t,
        "{} step(s); span {:.1} us a step; {:.0} launches beside the path a step ({})\n",
        steps.len(),
        us(span_ns as f64 / n),
        beside as f64 / n,
        BESIDE.join(", ")
    );
    t.push_str("| kernel | launches a step | held the path, us a step | share | us a launch | waited, us a launch | stamped after the release before, us |\n");
    t.push_str("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (name, k) in rows {
        let _ = writeln!(
            t,
            "| {name} | {:.0} | {:.1} | {:.1}% | {:.2} | {:.2} | {} |",
            k.launches as f64 / n,
            us(k.held_ns as f64 / n),
            100.0 * k.held_ns as f64 / span_ns.max(1) as f64,
            us(k.held_ns as f64 / k.holding.max(1) as f64),
            us(k.wait_ns as f64 / k.launches as f64),
            match k.lagged {
                0 => "-".to_string(),
                m => format!("{:.2}", us(k.lag_ns as f64 / m as f64)),
            }
        );
    }
    t
}

/// One step's stamps as CSV: kernel, µs before and after its wait from the step's first stamp.
pub fn csv(step: &[Stamp]) -> String {
    let t0 = step.iter().map(|s| s.before_ns).min().unwrap_or(0);
    let mut t = String::from("kernel,before_us,after_us\n");
    for s in step {
        let at = |ns: u64| (ns - t0) as f64 / 1e3;
        let _ = writeln!(t, "{},{:.3},{:.3}", s.name, at(s.before_ns), at(s.after_ns));
    }
    t
}

#[cfg(test)]
mod tests;
