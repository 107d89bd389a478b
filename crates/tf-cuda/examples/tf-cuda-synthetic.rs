//! `tf-cuda-synthetic [--model CONFIG:LAYOUT]... [--fill CONFIG[:LAYOUT]]... [--bench N]`:
//! synthetic checkpoints (weights generated on the GPU, no files) at real shapes.
//!
//! For each `--model` (default: `llama3-8b:q4_0` and the default model's shape
//! `smollm2-135m:q4_1,embed=q8_0,dense=f32`; CONFIG as `tf_families::synthetic::load_config`
//! reads it):
//! 1. Generator check: a few tensors filled on the device (embedding, layer-0 q_proj,
//!    the last layer's fused [gate|up], a norm) are downloaded whole and compared byte for byte
//!    with the host generator; a planted control (another seed) must differ.
//! 2. `GpuLlama` on the synthetic weights: decode rounds at 1 / 4 / 16 / 64 streams (graphed),
//!    logits finite, aggregate tok/s and the fraction of the memory roofline
//!    (weight bytes per step / 3.97e12 B/s).
//!
//! Each `--fill` (e.g. `bolt`, `lightning:q4_0`) fills every tensor of the model on the device
//! (stacked experts as the MoE kernels read them) and reports bytes, fill time and device
//! memory.

use std::process::ExitCode;
use std::time::Instant;
use tf_cuda::llama::{GpuLlama, GpuRow};
use tf_cuda::{load, synthetic, Gpu};
use tf_families::synthetic::checkpoint;
use tf_families::ModelPlan;
use tf_formats::checkpoint::Checkpoint;
use tf_formats::TensorEntry;

const ROOFLINE_BYTES_PER_S: f64 = 3.97e12;
const PROMPT: [u32; 5] = [504, 3575, 282, 4649, 314];

type Res<T> = Result<T, Box<dyn std::error::Error>>;

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
        match run_model(m, bench) {
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

/// Step 1: device fill == host generator on a few tensors (and a planted control differs).
fn check_generator(gpu: &Gpu, ck: &Checkpoint, plan: &tf_families::llama::LlamaPlan) -> Res<bool> {
    let seed = ck.synthetic_seed().ok_or("not synthetic")?;
    let last = plan.layers.last().ok_or("no layers")?;
    let groups: Vec<(&str, Vec<&TensorEntry>)> = vec![
        ("embedding", vec![&plan.embed_tokens]),
        ("layer 0 q_proj", vec![&plan.layers[0].q_proj]),
        ("last [gate|up]", vec![&last.gate_proj, &last.up_proj]),
        ("layer 0 down_proj", vec![&plan.layers[0].down_proj]),
    ];
    let mut ok = true;
    for (what, es) in &groups {
        let t = Instant::now();
        let m = load::matrices(gpu, ck, es)?;
        gpu.synchronize()?;
        let fill_s = t.elapsed().as_secs_f64();
        let dev = device_bytes(gpu, &m)?;
        let host = host_bytes(es, seed)?;
        let control = host_bytes(es, seed.wrapping_add(1))?;
        let same = dev == host;
        let caught = dev != control;
        println!(
            "generator {what} ({:?}, {} bytes, filled in {:.1} ms): device == host {same}; planted other-seed control differs {caught}",
            m.format(),
            dev.len(),
            fill_s * 1e3
        );
        ok &= same && caught;
    }
    let norm = load::vector(gpu, ck, &plan.norm)?;
    let dev = gpu.download(&norm, plan.norm.elements() as usize)?;
    let host = load::vector_host(ck, &plan.norm)?;
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let same = bits(&dev) == bits(&host);
    let near_one = dev.iter().all(|v| (0.8..1.2).contains(v));
    println!("generator final norm: device == host {same}; gains near 1 {near_one}");
    Ok(ok && same && near_one)
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

fn run_model(spec: &str, bench: usize) -> Res<bool> {
    let (config, quant) = split(spec);
    let ck = checkpoint(config, quant, None)?;
    let ModelPlan::Llama(plan) = tf_families::plan(ck.config(), ck.entries())? else {
        return Err(format!("{config}: not a llama-family config (use --fill)").into());
    };
    let gpu = Gpu::open(0)?;
    println!(
        "device: {} ({}); {} tensors, seed {:#x}",
        gpu.info().name,
        gpu.info().arch,
        ck.entries().len(),
        ck.synthetic_seed().unwrap_or(0)
    );
    let mut ok = check_generator(&gpu, &ck, &plan)?;
    let capacity = PROMPT.len() + bench + 8;
    let t0 = Instant::now();
    let mut g = GpuLlama::new(gpu, &ck, &plan, 64, capacity, 64)?;
    g.gpu().synchronize()?;
    let wb = g.weight_bytes();
    println!(
        "weights generated on the GPU: {wb} bytes read per step, filled in {:.2} s",
        t0.elapsed().as_secs_f64()
    );
    let vocab = g.vocab_size();
    let roofline_s = wb as f64 / ROOFLINE_BYTES_PER_S;
    println!(
        "roofline: {wb} B / 3.97 TB/s = {:.1} us per step",
        roofline_s * 1e6
    );
    println!("| streams | tok/s (aggregate) | us per step | roofline fraction | logits finite |");
    println!("| ---: | ---: | ---: | ---: | --- |");
    let mut logits = Vec::new();
    for streams in [1usize, 4, 16, 64] {
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
        let t = Instant::now();
        for _ in 0..bench {
            let rows: Vec<GpuRow> = (0..streams)
                .map(|slot| GpuRow {
                    slot,
                    pos,
                    token: next[slot],
                    logits: true,
                })
                .collect();
            g.forward_graphed(&rows, &mut logits)?;
            for (s, nx) in next.iter_mut().enumerate() {
                *nx = argmax(&logits[s * vocab..(s + 1) * vocab]);
            }
            pos += 1;
        }
        let dt = t.elapsed().as_secs_f64() / bench.max(1) as f64;
        finite &= logits.iter().all(|v| v.is_finite());
        ok &= finite;
        println!(
            "| {streams} | {:.0} | {:.1} | {:.3} | {finite} |",
            streams as f64 / dt,
            dt * 1e6,
            roofline_s / dt
        );
    }
    Ok(ok)
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
