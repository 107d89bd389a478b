//! `tf-cuda-synthetic [--model CONFIG:LAYOUT]... [--fill CONFIG[:LAYOUT]]... [--bench N]
//! [--leave-out N [--leave-out-streams S]] [--streams 1,4,16,64] [--profile-step]
//! [--timeline N [--timeline-csv PATH]]`:
//! synthetic checkpoints (weights generated on the GPU, no files) at real shapes.
//!
//! For each `--model` (default: `llama3-8b:q4_0` and the default model's shape
//! `smollm2-135m:q4_1,embed=q8_0,dense=f32`; CONFIG as `tf_families::synthetic::load_config`
//! reads it; llama configs run on `GpuLlama`, nemotron_h / nemotron_h_puzzle on `GpuNemotronH`):
//! 1. Generator check: a few tensors filled on the device (embedding, a projection, a fused
//!    [gate|up] or a stack of routed experts, a norm) are downloaded and compared byte for byte
//!    with the host generator; a planted control (another seed) must differ.
//! 2. Decode rounds on the synthetic weights at 1 / 4 / 16 / 64 streams (or `--streams`;
//!    graphed; each step as serving runs it: the logits stay on the device, the candidate
//!    selection picks each row's and only those come back, the greedy token the first), the
//!    last step's logits finite (and their bits' digest), aggregate tok/s and the fraction of
//!    the memory roofline: bytes one step must read / 3.97e12 B/s: the checkpoint's bytes (MLX
//!    at its own packing, not the device's wider layouts), a MoE layer's routed experts by the
//!    expected share touched by n tokens of top-k picks among E experts, `1 - (1 - k/E)^n`
//!    (random weights route near uniformly).
//!
//! 3. With `--leave-out N`: at one stream (or S, `--leave-out-streams`), the launches of a step
//!    by kernel, and what each kernel costs inside the graphed step: N replays of the whole
//!    step's graph against N of a graph captured with that kernel's launches left out
//!    (`tf_cuda::leave_out`), and the rise when each of its launches is made twice; then the
//!    step with only the matrix products kept, and with every kernel but them.
//!
//! 4. With `--profile-step`: one more graphed one-stream step (its graph captured before) between
//!    `cuProfilerStart` and `cuProfilerStop`, for `ncu --profile-from-start off` to time each of
//!    its kernels alone (`scripts/device/ncu-step.sh`).
//!
//! 5. With `--timeline N [--timeline-csv PATH]`: the program built with its stamps
//!    (`tf_cuda::timeline`; every figure above then comes from that program), and N more
//!    graphed one-stream steps stamped from inside their kernels: by kernel, the time each held
//!    the step's path; PATH gets the first step's stamps.
//!
//! Each `--fill` (e.g. `bolt`, `lightning:q4_0`) fills every tensor of the model on the device
//! (stacked experts as the MoE kernels read them) and reports bytes, fill time and device
//! memory.

use std::process::ExitCode;
use std::time::Instant;
use tf_cuda::llama::{GpuLlama, GpuRow};
use tf_cuda::nemotron_h::GpuNemotronH;
use tf_cuda::select::{select, GpuCandidates, SELECT_CAP};
use tf_cuda::{load, synthetic, Gpu};
use tf_families::nemotron_h::{ExpertWeights, NemotronBlock, NemotronMixer};
use tf_families::synthetic::checkpoint;
use tf_families::{ModelPlan, TensorClass};
use tf_formats::checkpoint::Checkpoint;
use tf_formats::TensorEntry;

const ROOFLINE_BYTES_PER_S: f64 = 3.97e12;
const PROMPT: [u32; 5] = [504, 3575, 282, 4649, 314];

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// FNV-1a over the values' bits: two runs whose last logits differ in any bit print other
/// digests (a settings A/B's same-bits check).
fn fnv1a(v: &[f32]) -> u64 {
    v.iter()
        .flat_map(|x| x.to_bits().to_le_bytes())
        .fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
        })
}

fn split(spec: &str) -> (&str, Option<&str>) {
    match spec.split_once(':') {
        Some((c, q)) => (c, Some(q)),
        None => (spec, None),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let values = |flag: &str| -> Vec<String> {
        args.windows(2)
            .filter(|w| w[0] == flag)
            .map(|w| w[1].clone())
            .collect()
    };
    let bench = values("--bench")
        .first()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64usize);
    let leave_out = values("--leave-out")
        .first()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0usize);
    let leave_out_streams = values("--leave-out-streams")
        .first()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1usize)
        .clamp(1, 64);
    let streams: Vec<usize> = values("--streams")
        .first()
        .map(|v| v.split(',').filter_map(|s| s.parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 4, 16, 64]);
    let profile = args.iter().any(|a| a == "--profile-step");
    let timeline = values("--timeline")
        .first()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0usize);
    let timeline_csv = values("--timeline-csv").first().cloned();
    if timeline > 0 {
        // Before any GPU opens: the program is built with the stamps.
        std::env::set_var(tf_cuda::timeline::ENV, "1");
    }
    let mut models = values("--model");
    let fills = values("--fill");
    if models.is_empty() && fills.is_empty() {
        models = vec![
            "llama3-8b:q4_0".into(),
            "smollm2-135m:q4_1,embed=q8_0,dense=f32".into(),
        ];
    }
    let mut ok = true;
    for m in &models {
        println!("\n# {m}");
        let probes = Probes {
            leave_out: (leave_out, leave_out_streams),
            profile,
            timeline: (timeline, timeline_csv.as_deref()),
        };
        match run_model(m, bench, &streams, &probes) {
            Ok(pass) => ok &= pass,
            Err(e) => {
                println!("error: {e}");
                ok = false;
            }
        }
    }
    for f in &fills {
        println!("\n# fill {f}");
        if let Err(e) = run_fill(f) {
            println!("error: {e}");
            ok = false;
        }
    }
    println!("\n{}", if ok { "PASS" } else { "FAIL" });
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Downloads a device byte buffer.
fn device_bytes(gpu: &Gpu, m: &tf_cuda::GpuMatrix) -> Res<Vec<u8>> {
    Ok(gpu.download(m.bytes(), m.storage_bytes())?)
}

/// Host generator bytes of several entries laid one after another.
fn host_bytes(es: &[&TensorEntry], seed: u64) -> Res<Vec<u8>> {
    let mut v = Vec::new();
    for e in es {
        v.extend(synthetic::host_device_bytes(e, seed, 0, e.elements())?);
    }
    Ok(v)
}

/// Compares a device matrix's bytes (from byte `at`) with the host generator's bytes of `es`
/// laid one after another; prints and returns whether they match and a planted control differs.
fn compare(
    gpu: &Gpu,
    what: &str,
    m: &tf_cuda::GpuMatrix,
    es: &[&TensorEntry],
    seed: u64,
    fill_s: f64,
) -> Res<bool> {
    let dev = device_bytes(gpu, m)?;
    let host = host_bytes(es, seed)?;
    let control = host_bytes(es, seed.wrapping_add(1))?;
    let (same, caught) = (dev == host, dev != control);
    println!(
        "generator {what} ({:?}, {} bytes, filled in {:.1} ms): device == host {same}; planted other-seed control differs {caught}",
        m.format(),
        dev.len(),
        fill_s * 1e3
    );
    Ok(same && caught)
}

/// Step 1: device fill == host generator on a few tensors (and a planted control differs).
fn check_generator(gpu: &Gpu, ck: &Checkpoint, plan: &ModelPlan) -> Res<bool> {
    let seed = ck.synthetic_seed().ok_or("not synthetic")?;
    let mut groups: Vec<(String, Vec<&TensorEntry>)> = Vec::new();
    let mut stacked: Option<(&TensorEntry, usize)> = None;
    let norm = match plan {
        ModelPlan::Llama(p) => {
            let last = p.layers.last().ok_or("no layers")?;
            groups.push(("embedding".into(), vec![&p.embed_tokens]));
            groups.push(("layer 0 q_proj".into(), vec![&p.layers[0].q_proj]));
            groups.push((
                "last [gate|up]".into(),
                vec![&last.gate_proj, &last.up_proj],
            ));
            &p.norm
        }
        ModelPlan::NemotronH(p) => {
            groups.push(("embedding".into(), vec![&p.embeddings]));
            for (l, layer) in p.layers.iter().enumerate() {
                match &layer.mixer {
                    NemotronMixer::Mamba { in_proj, .. } if groups.len() < 2 => {
                        groups.push((format!("layer {l} in_proj"), vec![in_proj]))
                    }
                    NemotronMixer::Moe {
                        experts: ExpertWeights::Stacked { up, .. },
                        ..
                    } if stacked.is_none() => stacked = Some((up, l)),
                    _ => {}
                }
            }
            &p.norm_f
        }
        ModelPlan::MuseSpark(_) => return Err("muse_spark: no synthetic device check".into()),
    };
    let mut ok = true;
    for (what, es) in &groups {
        let t = Instant::now();
        let m = load::matrices(gpu, ck, es)?;
        gpu.synchronize()?;
        ok &= compare(gpu, what, &m, es, seed, t.elapsed().as_secs_f64())?;
    }
    if let Some((up, l)) = stacked {
        let t = Instant::now();
        let n = up.shape[0] as usize;
        let x = synthetic::experts(gpu, seed, up, n)?;
        gpu.synchronize()?;
        let flat = TensorEntry {
            shape: vec![up.shape[0] * up.shape[1], up.shape[2]],
            ..up.clone()
        };
        ok &= compare(
            gpu,
            &format!("layer {l} stacked experts ({n})"),
            x.matrix(),
            &[&flat],
            seed,
            t.elapsed().as_secs_f64(),
        )?;
    }
    let v = load::vector(gpu, ck, norm)?;
    let dev = gpu.download(&v, norm.elements() as usize)?;
    let host = load::vector_host(ck, norm)?;
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let same = bits(&dev) == bits(&host);
    let near_one = dev.iter().all(|v| (0.8..1.2).contains(v));
    println!("generator final norm: device == host {same}; gains near 1 {near_one}");
    Ok(ok && same && near_one)
}

/// Bytes one decode step of `streams` tokens must read: every tensor once as the checkpoint
/// stores it (the embedding only as a tied head), routed experts by the expected share touched.
fn step_bytes(plan: &ModelPlan, streams: usize) -> f64 {
    let tied = plan.claims().iter().all(|c| c.class != TensorClass::Head);
    let routing = |layer: usize| match plan {
        ModelPlan::NemotronH(p) => match p.config.layers.get(layer) {
            Some(NemotronBlock::Moe(m)) => {
                (m.num_experts_per_tok as f64, m.n_routed_experts as f64)
            }
            _ => (1.0, 1.0),
        },
        _ => (1.0, 1.0),
    };
    plan.claims()
        .iter()
        .map(|c| {
            let e = &c.entry;
            let bytes = e.format.storage_bytes(e.elements()) as f64;
            match (c.class, c.layer) {
                (TensorClass::Embedding, _) if !tied => 0.0,
                (TensorClass::RoutedExperts, Some(l)) => {
                    let (k, n) = routing(l);
                    bytes * (1.0 - (1.0 - k / n).powi(streams as i32))
                }
                _ => bytes,
            }
        })
        .sum()
}

/// A decoder on the GPU, whichever family.
enum Decoder {
    Llama(Box<GpuLlama>),
    Nemotron(Box<GpuNemotronH>),
}

impl Decoder {
    fn forward_graphed(&mut self, rows: &[GpuRow], logits: &mut Vec<f32>) -> tf_cuda::Result<()> {
        match self {
            Decoder::Llama(g) => g.forward_graphed(rows, logits),
            Decoder::Nemotron(g) => g.forward_graphed(rows, logits),
        }
    }
    fn graph_edges(&self) -> (usize, usize) {
        match self {
            Decoder::Llama(g) => g.graph_edges(),
            Decoder::Nemotron(g) => g.graph_edges(),
        }
    }
    fn clear_graphs(&mut self) {
        match self {
            Decoder::Llama(g) => g.clear_graphs(),
            Decoder::Nemotron(g) => g.clear_graphs(),
        }
    }
    /// Rewinds `slot` to `len` tokens where the family can (else to 0); returns its length.
    fn rewind(&mut self, slot: usize, len: usize) -> tf_cuda::Result<usize> {
        match self {
            Decoder::Llama(g) => g.set_slot_len(slot, len).map(|_| len),
            Decoder::Nemotron(g) => Ok(g.truncate_slot(slot, len).unwrap_or(0)),
        }
    }
    fn reset_slot(&mut self, slot: usize) {
        match self {
            Decoder::Llama(g) => g.reset_slot(slot),
            Decoder::Nemotron(g) => g.reset_slot(slot),
        }
    }
    /// The latest round's logits on the device.
    fn logits_device(&self) -> &cudarc::driver::CudaSlice<f32> {
        match self {
            Decoder::Llama(g) => g.logits_device(),
            Decoder::Nemotron(g) => g.logits_device(),
        }
    }
    fn vocab_size(&self) -> usize {
        match self {
            Decoder::Llama(g) => g.vocab_size(),
            Decoder::Nemotron(g) => g.vocab_size(),
        }
    }
    fn weight_bytes(&self) -> usize {
        match self {
            Decoder::Llama(g) => g.weight_bytes(),
            Decoder::Nemotron(g) => g.weight_bytes(),
        }
    }
    fn gpu(&self) -> &Gpu {
        match self {
            Decoder::Llama(g) => g.gpu(),
            Decoder::Nemotron(g) => g.gpu(),
        }
    }
}

fn argmax(x: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best as u32
}

/// What runs after the decode table.
struct Probes<'a> {
    /// (replays, streams) of the leave-out table; no table at 0 replays.
    leave_out: (usize, usize),
    /// One profiled one-stream step.
    profile: bool,
    /// (steps, CSV path) of the timeline; none at 0 steps.
    timeline: (usize, Option<&'a str>),
}

/// What a run of graphed steps does besides timing them.
enum Probe {
    Off,
    /// Between `cuProfilerStart` and `cuProfilerStop`.
    Profile,
    /// Each step's stamps read (`tf_cuda::timeline`).
    Timeline(Vec<Vec<tf_cuda::timeline::Stamp>>),
}

fn run_model(spec: &str, bench: usize, streams_list: &[usize], probes: &Probes) -> Res<bool> {
    let leave_out = probes.leave_out;
    let (config, quant) = split(spec);
    let ck = checkpoint(config, quant, None)?;
    let plan = tf_families::plan(ck.config(), ck.entries())?;
    let gpu = Gpu::open(0)?;
    println!(
        "device: {} ({}); {} ({}), {} tensors, seed {:#x}",
        gpu.info().name,
        gpu.info().arch,
        plan.family(),
        plan.num_layers(),
        ck.entries().len(),
        ck.synthetic_seed().unwrap_or(0)
    );
    let mut ok = check_generator(&gpu, &ck, &plan)?;
    let capacity = PROMPT.len() + bench.max(leave_out.0 + 1) + 8;
    let t0 = Instant::now();
    let mut g = match &plan {
        ModelPlan::Llama(p) => {
            Decoder::Llama(Box::new(GpuLlama::new(gpu, &ck, p, 64, capacity, 64)?))
        }
        ModelPlan::NemotronH(p) => {
            Decoder::Nemotron(Box::new(GpuNemotronH::new(gpu, &ck, p, 64, capacity, 64)?))
        }
        ModelPlan::MuseSpark(_) => return Err("muse_spark: no synthetic decode here".into()),
    };
    g.gpu().synchronize()?;
    let (free, total) = cudarc::driver::result::mem_get_info()?;
    println!(
        "weights generated on the GPU: {} bytes, filled in {:.2} s; device memory used {:.1} of {:.1} GB",
        g.weight_bytes(),
        t0.elapsed().as_secs_f64(),
        (total - free) as f64 / 1e9,
        total as f64 / 1e9
    );
    let vocab = g.vocab_size();
    println!("| streams | tok/s (aggregate) | us per step | bytes per step | roofline us | roofline fraction | logits finite | last logits' bits (FNV-1a) |");
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |");
    let mut logits = Vec::new();
    for &streams in streams_list {
        for s in 0..streams {
            g.reset_slot(s);
        }
        let mut pos = 0;
        for &t in &PROMPT {
            let rows: Vec<GpuRow> = (0..streams)
                .map(|slot| GpuRow {
                    slot,
                    pos,
                    token: t,
                    logits: true,
                })
                .collect();
            g.forward_graphed(&rows, &mut logits)?;
            pos += 1;
        }
        let mut next: Vec<u32> = (0..streams)
            .map(|s| argmax(&logits[s * vocab..(s + 1) * vocab]))
            .collect();
        let mut finite = logits.iter().all(|v| v.is_finite());
        let all: Vec<usize> = (0..streams).collect();
        let mut cands = GpuCandidates::new(g.gpu(), streams, SELECT_CAP)?;
        let t = Instant::now();
        for _ in 0..bench {
            // As serving runs a round: the logits stay on the device and only each row's
            // candidates come back; the greedy token is the first.
            let rows: Vec<GpuRow> = (0..streams)
                .map(|slot| GpuRow {
                    slot,
                    pos,
                    token: next[slot],
                    logits: false,
                })
                .collect();
            g.forward_graphed(&rows, &mut logits)?;
            select(g.gpu(), g.logits_device(), &all, vocab, &mut cands)?;
            for (nx, c) in next.iter_mut().zip(cands.download(g.gpu(), streams)?) {
                *nx = c.top.first().ok_or("a row without candidates")?.0;
            }
            pos += 1;
        }
        let dt = t.elapsed().as_secs_f64() / bench.max(1) as f64;
        let last = g.gpu().download(g.logits_device(), streams * vocab)?;
        finite &= last.iter().all(|v| v.is_finite());
        ok &= finite;
        let sb = step_bytes(&plan, streams);
        let roofline_s = sb / ROOFLINE_BYTES_PER_S;
        println!(
            "| {streams} | {:.0} | {:.1} | {sb:.3e} | {:.1} | {:.3} | {finite} | {:016x} |",
            streams as f64 / dt,
            dt * 1e6,
            roofline_s * 1e6,
            roofline_s / dt,
            fnv1a(&last)
        );
    }
    let (programmatic, edges) = g.graph_edges();
    println!("graph edges made programmatic (kernel to kernel; none with TF_CUDA_PDL=0): {programmatic} of {edges}");
    if leave_out.0 > 0 {
        leave_out_table(&mut g, leave_out.0, leave_out.1)?;
    }
    if probes.profile {
        let dt = step_time(&mut g, 1, 1, &mut Probe::Profile)?;
        println!("profiled step: {:.1} us", dt * 1e6);
    }
    if let (steps @ 1.., csv) = probes.timeline {
        let mut probe = Probe::Timeline(Vec::new());
        step_time(&mut g, steps, 1, &mut probe)?;
        if let Probe::Timeline(stamped) = probe {
            println!(
                "\ntimeline, one stream:\n{}",
                tf_cuda::timeline::table(&stamped)
            );
            if let Some(path) = csv {
                std::fs::write(path, tf_cuda::timeline::csv(&stamped[0]))?;
            }
        }
    }
    Ok(ok)
}

/// Seconds per graphed step of slots 0..`streams` over `reps` steps from the prompt's end (the
/// graph captured afresh, with whatever `tf_cuda::leave_out` names left out), `probe` on the
/// replays.
fn step_time(g: &mut Decoder, reps: usize, streams: usize, probe: &mut Probe) -> Res<f64> {
    g.clear_graphs();
    let mut pos = g.rewind(0, PROMPT.len())?;
    for slot in 1..streams {
        if g.rewind(slot, PROMPT.len())? != pos {
            return Err(format!("slot {slot} rewinds to another length than slot 0").into());
        }
    }
    let mut logits = Vec::new();
    let mut step = |g: &mut Decoder, pos: usize| {
        let rows: Vec<GpuRow> = (0..streams)
            .map(|slot| GpuRow {
                slot,
                pos,
                token: PROMPT[(pos + slot) % PROMPT.len()],
                logits: true,
            })
            .collect();
        g.forward_graphed(&rows, &mut logits)
    };
    step(g, pos)?; // captures
    pos += 1;
    if let Probe::Profile = probe {
        // SAFETY: no arguments; the driver is loaded (the context is current).
        unsafe { cudarc::driver::sys::cuProfilerStart() }.result()?;
    }
    let t = Instant::now();
    for _ in 0..reps {
        if let Probe::Timeline(_) = probe {
            g.gpu().synchronize()?;
            g.gpu().timeline_clear()?;
        }
        step(g, pos)?;
        if let Probe::Timeline(steps) = probe {
            steps.push(g.gpu().timeline()?);
        }
        pos += 1;
    }
    let dt = t.elapsed().as_secs_f64() / reps as f64;
    if let Probe::Profile = probe {
        g.gpu().synchronize()?;
        // SAFETY: as above.
        unsafe { cudarc::driver::sys::cuProfilerStop() }.result()?;
    }
    Ok(dt)
}

/// Seconds per graphed step with the launches of the kernels named in `names` left out.
fn step_time_without<S: AsRef<str>>(
    g: &mut Decoder,
    names: &[S],
    reps: usize,
    streams: usize,
) -> Res<f64> {
    tf_cuda::leave_out::start(names);
    let t = step_time(g, reps, streams, &mut Probe::Off);
    tf_cuda::leave_out::finish();
    t
}

/// Step 3: launches per step of `streams` rows by kernel, and each kernel's cost inside the
/// graphed step.
fn leave_out_table(g: &mut Decoder, reps: usize, streams: usize) -> Res<()> {
    tf_cuda::leave_out::start::<&str>(&[]);
    let whole = step_time(g, reps, streams, &mut Probe::Off);
    // The capture made each launch once.
    let counts = tf_cuda::leave_out::finish();
    let whole = whole?;
    println!(
        "\n{streams} stream(s), {reps} graphed steps each: the whole step {:.1} us; each kernel left out in turn:\n",
        whole * 1e6
    );
    println!("| kernel | launches a step | step without it, us | its cost, us | share | each launch made twice: rise, us a launch |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    let mut rows = Vec::new();
    for (name, &launches) in &counts {
        let cost = whole - step_time_without(g, &[name], reps, streams)?;
        tf_cuda::leave_out::start_with::<&str, _>(&[], &[name]);
        let twice = step_time(g, reps, streams, &mut Probe::Off);
        tf_cuda::leave_out::finish();
        rows.push((cost, name, launches, twice? - whole));
    }
    rows.sort_by(|a, b| b.0.total_cmp(&a.0));
    let total: f64 = rows.iter().map(|r| r.0).sum();
    for (cost, name, launches, rise) in &rows {
        println!(
            "| {name} | {launches} | {:.1} | {:.1} | {:.1}% | {:.2} |",
            (whole - cost) * 1e6,
            cost * 1e6,
            100.0 * cost / whole,
            rise * 1e6 / *launches as f64
        );
    }
    let launches: usize = counts.values().sum();
    println!(
        "| all kernels (sum of the costs) | {launches} | | {:.1} | {:.1}% |",
        total * 1e6,
        100.0 * total / whole
    );
    // What the step costs with only the products kept, and with only the rest.
    let (products, rest): (Vec<&String>, Vec<&String>) = counts.keys().partition(|n| is_product(n));
    println!("\n| kept | launches a step | step, us | share of the whole |");
    println!("| --- | ---: | ---: | ---: |");
    for (kept, left_out) in [
        ("the matrix products alone", &rest),
        ("every kernel but the products", &products),
    ] {
        let t = step_time_without(g, left_out, reps, streams)?;
        let n = launches - left_out.iter().map(|k| counts[*k]).sum::<usize>();
        println!(
            "| {kept} | {n} | {:.1} | {:.1}% |",
            t * 1e6,
            100.0 * t / whole
        );
    }
    g.clear_graphs();
    Ok(())
}

/// Whether a kernel is a matrix product (it reads a weight matrix).
fn is_product(name: &str) -> bool {
    const PREFIXES: [&str; 10] = [
        "tf_matmul",
        "tf_mma_mlx4",
        "tf_moe_matmul",
        "tf_moe_mma",
        "tf_slices",
        "tf_moe_slices",
        "tf_mmq",
        "tf_mmv",
        "tf_mmg",
        "tf_mmf",
    ];
    PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Fills every tensor of a model on the device (matrices, stacked experts, other tensors as f32
/// vectors) and reports bytes, time and memory.
fn run_fill(spec: &str) -> Res<()> {
    let (config, quant) = split(spec);
    let ck = checkpoint(config, quant, None)?;
    let plan = tf_families::plan(ck.config(), ck.entries())?;
    let gpu = Gpu::open(0)?;
    let (mut mats, mut vecs, mut bytes) = (Vec::new(), Vec::new(), 0usize);
    let mut experts = Vec::new();
    let t = Instant::now();
    for e in ck.entries() {
        match e.shape[..] {
            [_, _] => {
                let m = load::matrix(&gpu, &ck, e)?;
                bytes += m.storage_bytes();
                mats.push(m);
            }
            [n, _, _] if e.name.contains("switch_mlp") => {
                let seed = ck.synthetic_seed().ok_or("not synthetic")?;
                let x = synthetic::experts(&gpu, seed, e, n as usize)?;
                bytes += x.storage_bytes();
                experts.push(x);
            }
            _ => {
                vecs.push(load::vector(&gpu, &ck, e)?);
                bytes += e.elements() as usize * 4;
            }
        }
    }
    gpu.synchronize()?;
    let dt = t.elapsed().as_secs_f64();
    let (free, total) = cudarc::driver::result::mem_get_info()?;
    println!(
        "{} ({}): {} tensors, {} layers; {:.2} GB on the device in {:.2} s ({:.1} GB/s incl. allocation); device memory used {:.1} of {:.1} GB",
        plan.family(),
        ck.config()["model_type"],
        ck.entries().len(),
        plan.num_layers(),
        bytes as f64 / 1e9,
        dt,
        bytes as f64 / 1e9 / dt,
        (total - free) as f64 / 1e9,
        total as f64 / 1e9
    );
    Ok(())
}
