//! `tf-cuda-nemotron [PATH ...] [--greedy N] [--strict]`: Nemotron-H / Puzzle on the GPU against
//! the CPU engine (`tf_models::load` + `forward`) on every fixture form under each PATH (a
//! checkpoint folder, or a folder of them; default `fixtures/nemotron_h`).
//!
//! Per checkpoint:
//! 1. fidelity: the fixture's prompt (`tokens.json` beside the form folder) then N greedy tokens
//!    chosen by the CPU, one row per step to both engines: max |Δlogit|, top-1 agreement,
//!    bit-identical positions (all must be identical, or, where the forward took `tf_slices`,
//!    the GPU's own order, max |Δlogit| within `slices::FIDELITY_TOLERANCE`; top-1 always);
//! 2. chunked == serial: the whole sequence as one round, and in chunks of 5;
//! 3. concurrent == solo: three slots fed the sequence at staggered offsets in shared rounds;
//! 4. graphed == eager: one row per step through the captured graph, and 3-row graphed rounds;
//! 5. truncation: a used slot cut short restarts (length 0) and, fed again, equals the first run;
//! 6. resumed == fresh: a slot's KV and Mamba state copied through the host into another slot,
//!    which continues the sequence.
//!
//! `--synthetic NAME[:LAYOUT] [--bench N]` instead times graphed decode rounds of a synthetic
//! model (weights generated on the device, e.g. `lightning:q4_0`, `bolt:bf16`).
//!
//! Exit status: 0 when every checkpoint that loaded passed (checkpoints refused by name for an
//! unsupported weight format are listed, and fail the run only with `--strict`), 1 on any
//! mismatch or a checkpoint whose checks stopped on an error (the others still run), 2 on an
//! error before any check (no GPU, no checkpoints). The summary is a markdown table.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;
use tf_cuda::nemotron_h::{GpuNemotronH, GpuRow};
use tf_cuda::{slices, CudaError, Gpu};
use tf_families::ModelPlan;
use tf_formats::checkpoint::Checkpoint;
use tf_models::{LoadOptions, Row};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn argmax(x: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best
}

fn bits_equal(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// Checkpoint folders under `p` (itself, or its children / grandchildren with a config.json).
fn checkpoints(p: &Path, out: &mut Vec<PathBuf>, depth: usize) -> Res<()> {
    if p.join("config.json").is_file() {
        out.push(p.to_path_buf());
        return Ok(());
    }
    if depth == 0 || !p.is_dir() {
        return Ok(());
    }
    let mut kids: Vec<PathBuf> = std::fs::read_dir(p)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|k| k.is_dir())
        .collect();
    kids.sort();
    for k in kids {
        checkpoints(&k, out, depth - 1)?;
    }
    Ok(())
}

/// The prompt: `tokens.json` (a JSON list of ids) in the checkpoint folder or its parent, else
/// a fixed spread of 24 small ids (fixtures without a prompt of their own, e.g. the MTP ones).
fn prompt(dir: &Path) -> Res<Vec<u32>> {
    let Some(f) = [dir.join("tokens.json"), dir.join("../tokens.json")]
        .into_iter()
        .find(|f| f.is_file())
    else {
        return Ok((0..24u32).map(|i| 1 + (i * 37) % 60).collect());
    };
    let text = std::fs::read_to_string(&f)?;
    let body = text.trim().trim_start_matches('[').trim_end_matches(']');
    let ids = body
        .split(',')
        .map(|t| t.trim().parse::<u32>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: {e}", f.display()))?;
    Ok(ids)
}

/// Resets `slot` and feeds it `seq` from position 0 in rounds of `chunk` rows; returns each
/// position's logits.
fn feed(
    g: &mut GpuNemotronH,
    slot: usize,
    seq: &[u32],
    chunk: usize,
    graphed: bool,
) -> Res<Vec<Vec<f32>>> {
    let vocab = g.vocab_size();
    g.reset_slot(slot);
    let mut out = Vec::with_capacity(seq.len());
    let mut gl = Vec::new();
    for (c, part) in seq.chunks(chunk).enumerate() {
        let rows: Vec<GpuRow> = part
            .iter()
            .enumerate()
            .map(|(i, &t)| GpuRow::wanted(slot, c * chunk + i, t))
            .collect();
        if graphed {
            g.forward_graphed(&rows, &mut gl)?;
        } else {
            g.forward(&rows, &mut gl)?;
        }
        out.extend(gl.chunks_exact(vocab).map(|l| l.to_vec()));
    }
    Ok(out)
}

fn same_all(a: &[Vec<f32>], b: &[Vec<f32>]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| bits_equal(x, y))
}

/// What one checkpoint's checks found.
struct Outcome {
    positions: usize,
    max_d: f64,
    top1: usize,
    identical: usize,
    /// Whether the forward took `tf_slices` (the GPU's own order): fidelity, not the CPU's bits.
    own_order: bool,
    chunked: bool,
    concurrent: bool,
    graphed: bool,
    truncated: bool,
    resumed: bool,
}

impl Outcome {
    fn passed(&self) -> bool {
        let n = self.positions;
        let close = self.own_order && self.max_d <= slices::FIDELITY_TOLERANCE;
        self.top1 == n
            && (self.identical == n || close)
            && self.chunked
            && self.concurrent
            && self.graphed
            && self.truncated
            && self.resumed
    }
}

/// Runs every check on one checkpoint; `Ok(None)` when the GPU refused it by name.
fn check(gpu: Gpu, dir: &Path, greedy: usize) -> Res<Option<Outcome>> {
    let ck = Checkpoint::open(dir)?;
    let ModelPlan::NemotronH(plan) =
        tf_families::plan(ck.config(), ck.entries()).map_err(|r| format!("{r:?}"))?
    else {
        return Err(format!("{}: not a Nemotron-H checkpoint", dir.display()).into());
    };
    let base = prompt(dir)?;
    let capacity = base.len() + greedy + 8;
    let mut g = match GpuNemotronH::new(gpu, &ck, &plan, 8, capacity, capacity) {
        Ok(g) => g,
        Err(e @ CudaError::UnsupportedFormat { .. }) => {
            println!("REFUSED by name: {e}");
            return Ok(None);
        }
        Err(e) => return Err(e.into()),
    };
    println!(
        "weights on the GPU: {} bytes; Mamba state {} bytes per slot",
        g.weight_bytes(),
        g.mamba_state_bytes_per_slot()
    );
    let mut cpu = tf_models::load(dir, &LoadOptions::default())?;
    let vocab = g.vocab_size();
    // 1. Fidelity, teacher-forced on the CPU's greedy tokens, one row per step.
    let mut state = cpu.new_state();
    let (mut cl, mut gl) = (Vec::new(), Vec::new());
    let mut seq = base.clone();
    let (mut max_d, mut top1, mut identical) = (0f64, 0usize, 0usize);
    let mut serial: Vec<Vec<f32>> = Vec::new();
    let mut pos = 0;
    let own_before = slices::launches();
    while pos < seq.len() {
        let tok = seq[pos];
        let cpu_row = Row {
            stream: 0,
            pos,
            token: tok,
            logits: true,
        };
        cpu.forward(&[cpu_row], &mut [&mut state], &mut cl)?;
        g.forward(&[GpuRow::wanted(0, pos, tok)], &mut gl)?;
        let d = cl
            .iter()
            .zip(&gl)
            .map(|(a, b)| (*a as f64 - *b as f64).abs())
            .fold(0.0, f64::max);
        max_d = max_d.max(d);
        top1 += (argmax(&cl) == argmax(&gl)) as usize;
        identical += bits_equal(&cl, &gl) as usize;
        serial.push(gl.clone());
        if pos + 1 == seq.len() && seq.len() < base.len() + greedy {
            seq.push(argmax(&cl) as u32);
        }
        pos += 1;
    }
    let n = seq.len();
    let own_order = slices::launches() > own_before;
    println!("fidelity vs the CPU engine ({n} positions: {} prompt + {greedy} greedy): max |dlogit| = {max_d:.3e}; top-1 {top1}/{n}; bit-identical {identical}/{n}; GPU's own order (tf_slices or tf_mma): {own_order}", base.len());
    // 2. Chunked == serial.
    let one_round = same_all(&feed(&mut g, 1, &seq, n, false)?, &serial);
    let chunks5 = same_all(&feed(&mut g, 2, &seq, 5, false)?, &serial);
    // 3. Concurrent == solo: slots 3, 4, 5 start at rounds 0, 3, 7 and share every round.
    let starts = [0usize, 3, 7];
    let slots = [3usize, 4, 5];
    for &s in &slots {
        g.reset_slot(s);
    }
    let mut got: Vec<Vec<Vec<f32>>> = vec![Vec::new(); 3];
    let mut r = 0;
    while got.iter().any(|v| v.len() < n) {
        let mut rows = Vec::new();
        let mut who = Vec::new();
        for k in 0..3 {
            if r >= starts[k] {
                // A varying number of rows per slot per round (1 or 2).
                let take = 1 + (r + k) % 2;
                for _ in 0..take {
                    let p = got[k].len() + who.iter().filter(|&&w| w == k).count();
                    if p < n {
                        rows.push(GpuRow::wanted(slots[k], p, seq[p]));
                        who.push(k);
                    }
                }
            }
        }
        if !rows.is_empty() {
            g.forward(&rows, &mut gl)?;
            for (j, &k) in who.iter().enumerate() {
                got[k].push(gl[j * vocab..(j + 1) * vocab].to_vec());
            }
        }
        r += 1;
    }
    let concurrent = got.iter().all(|v| same_all(v, &serial));
    // 4. Graphed == eager: one row per step, then 3-row rounds (slots 6, 7 and slot 1 again).
    let graphed1 = same_all(&feed(&mut g, 6, &seq, 1, true)?, &serial);
    for s in [6, 7, 1] {
        g.reset_slot(s);
    }
    let mut graphed3 = true;
    for (p, &t) in seq.iter().enumerate() {
        let rows = [
            GpuRow::wanted(6, p, t),
            GpuRow::wanted(7, p, t),
            GpuRow::wanted(1, p, t),
        ];
        g.forward_graphed(&rows, &mut gl)?;
        graphed3 &= (0..3).all(|j| bits_equal(&gl[j * vocab..(j + 1) * vocab], &serial[p]));
    }
    // 5. Truncation: slot 0 (fully used) cut to 5 tokens restarts (the CPU's rule for a
    //    recurrent stream), then fed again from position 0 equals the first run.
    let restarted = g.truncate_slot(0, 5) == Some(0) && g.slot_len(0) == Some(0);
    let kept = g.truncate_slot(0, 0) == Some(0);
    let reset = restarted && kept && same_all(&feed(&mut g, 0, &seq, 3, false)?, &serial);
    // 6. Resumed == fresh: slot 1's state after half the sequence copied through the host into
    //    slot 7, which then continues the sequence.
    let half = n / 2;
    feed(&mut g, 1, &seq[..half], 4, false)?;
    g.reset_slot(7);
    for l in 0..g.attention_layers() {
        let (k, v) = g.read_kv(1, l, half)?;
        g.write_kv(7, l, &k, &v)?;
    }
    for l in 0..g.mamba_layers() {
        let (c, s) = g.read_mamba(1, l)?;
        g.write_mamba(7, l, &c, &s)?;
    }
    g.set_slot_len(7, half)?;
    let mut resumed = true;
    for (p, &t) in seq.iter().enumerate().skip(half) {
        g.forward(&[GpuRow::wanted(7, p, t)], &mut gl)?;
        resumed &= bits_equal(&gl, &serial[p]);
    }
    println!("chunked == serial: one round {one_round}, chunks of 5 {chunks5}; 3 staggered slots in shared rounds == solo: {concurrent}; graphed == eager: 1 row {graphed1}, 3-row rounds {graphed3}; truncated slot restarts == fresh: {reset}; resumed from a host copy at {half} == fresh: {resumed}");
    Ok(Some(Outcome {
        positions: n,
        max_d,
        top1,
        identical,
        own_order,
        chunked: one_round && chunks5,
        concurrent,
        graphed: graphed1 && graphed3,
        truncated: reset,
        resumed,
    }))
}

/// Decode speed of a synthetic model (weights generated on the device; no CPU comparison):
/// graphed rounds of 1, 4, 16 and 64 streams, `steps` rounds each after a one-token start.
fn bench_synthetic(spec: &str, steps: usize) -> Res<()> {
    let (name, layout) = match spec.split_once(':') {
        Some((n, l)) => (n, Some(l)),
        None => (spec, None),
    };
    let ck = tf_families::synthetic::checkpoint(name, layout, None)?;
    let ModelPlan::NemotronH(plan) =
        tf_families::plan(ck.config(), ck.entries()).map_err(|r| format!("{r:?}"))?
    else {
        return Err(format!("{spec}: not a Nemotron-H config").into());
    };
    let gpu = Gpu::open(0)?;
    println!("device: {} ({})", gpu.info().name, gpu.info().arch);
    let t0 = Instant::now();
    let mut g = GpuNemotronH::new(gpu, &ck, &plan, 64, steps + 2, 64)?;
    println!(
        "synthetic {spec}: {} layers, {} bytes of weights generated on the device in {:.2} s; Mamba state {} bytes per slot",
        plan.layers.len(),
        g.weight_bytes(),
        t0.elapsed().as_secs_f64(),
        g.mamba_state_bytes_per_slot()
    );
    println!("| streams | tok/s (aggregate) | us per round |\n| ---: | ---: | ---: |");
    let mut gl = Vec::new();
    for streams in [1usize, 4, 16, 64] {
        let first: Vec<GpuRow> = (0..streams).map(|s| GpuRow::wanted(s, 0, 1)).collect();
        for s in 0..streams {
            g.reset_slot(s);
        }
        g.forward_graphed(&first, &mut gl)?;
        let t = Instant::now();
        for p in 1..=steps {
            let rows: Vec<GpuRow> = (0..streams)
                .map(|s| GpuRow::wanted(s, p, (p % 7) as u32))
                .collect();
            g.forward_graphed(&rows, &mut gl)?;
        }
        let dt = t.elapsed().as_secs_f64() / steps.max(1) as f64;
        println!(
            "| {streams} | {:.0} | {:.1} |",
            streams as f64 / dt,
            dt * 1e6
        );
    }
    Ok(())
}

fn run() -> Res<bool> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut greedy = 16;
    let mut strict = false;
    let mut synthetic: Option<&String> = None;
    let mut bench = 64;
    let mut paths = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--greedy" => greedy = it.next().and_then(|v| v.parse().ok()).ok_or("--greedy N")?,
            "--strict" => strict = true,
            "--synthetic" => synthetic = Some(it.next().ok_or("--synthetic NAME[:LAYOUT]")?),
            "--bench" => bench = it.next().and_then(|v| v.parse().ok()).ok_or("--bench N")?,
            p => paths.push(PathBuf::from(p)),
        }
    }
    if let Some(spec) = synthetic {
        return bench_synthetic(spec, bench).map(|()| true);
    }
    if paths.is_empty() {
        paths.push(PathBuf::from("fixtures/nemotron_h"));
    }
    let mut dirs = Vec::new();
    for p in &paths {
        checkpoints(p, &mut dirs, 2)?;
    }
    if dirs.is_empty() {
        return Err(format!("no checkpoint folders under {paths:?}").into());
    }
    let info = Gpu::open(0)?;
    println!(
        "device: {} ({}), kernels {:?} in {:.2} s",
        info.info().name,
        info.info().arch,
        info.info().ptx_origin,
        info.info().load_time.as_secs_f64()
    );
    drop(info);
    let (mut passed, mut failed, mut refused) = (Vec::new(), Vec::new(), Vec::new());
    let mut table = String::from("| checkpoint | positions | max abs dlogit | top-1 | bit-identical | chunked == serial | concurrent == solo | graphed == eager | truncate restarts | resumed == fresh |\n| --- | ---: | ---: | ---: | ---: | --- | --- | --- | --- | --- |\n");
    for d in &dirs {
        let name = d.display().to_string();
        println!("\n## {name}");
        match Gpu::open(0)
            .map_err(|e| e.into())
            .and_then(|gpu| check(gpu, d, greedy))
        {
            Ok(Some(o)) => {
                let n = o.positions;
                table.push_str(&format!(
                    "| {name} | {n} | {:.2e} | {}/{n} | {}/{n}{} | {} | {} | {} | {} | {} |\n",
                    o.max_d,
                    o.top1,
                    o.identical,
                    if o.own_order { " (GPU order)" } else { "" },
                    o.chunked,
                    o.concurrent,
                    o.graphed,
                    o.truncated,
                    o.resumed
                ));
                if o.passed() {
                    passed.push(name);
                } else {
                    failed.push(name);
                }
            }
            Ok(None) => {
                table.push_str(&format!("| {name} | refused by name | | | | | | | | |\n"));
                refused.push(name);
            }
            Err(e) => {
                println!("ERROR: {e}");
                table.push_str(&format!("| {name} | error: {e} | | | | | | | | |\n"));
                failed.push(name);
            }
        }
    }
    println!("\n## summary\n\n{table}\npassed {}: {passed:?}\nfailed {}: {failed:?}\nrefused by name {}: {refused:?}", passed.len(), failed.len(), refused.len());
    let ok = failed.is_empty() && !passed.is_empty() && (!strict || refused.is_empty());
    println!("{}", if ok { "PASS" } else { "FAIL" });
    Ok(ok)
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("tf-cuda-nemotron: {e}");
            ExitCode::from(2)
        }
    }
}
