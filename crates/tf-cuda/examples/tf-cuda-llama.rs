//! `tf-cuda-llama MODEL [--steps N] [--bench N]`: the llama decode step on the GPU against the
//! CPU engine on the same tokens, then decode speed.
//!
//! 1. Fidelity: the prompt (default: "The capital of France is" = 504 3575 282 4649 314) and then
//!    N greedy tokens chosen by the CPU are fed one row per step to both engines (teacher
//!    forcing); per step: max |Δlogit|, top-1 agreement, bit-identical logits.
//! 2. Exactness on the GPU: the prompt as one 5-row round == token by token; 4 slots in one round
//!    == each alone; graph replay == eager launches (all bit for bit).
//! 3. Speed: single-stream decode, eager and graphed, and graphed rounds of 4/16/64 streams
//!    (aggregate tokens per second), against the weight-read roofline.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;
use tf_cuda::llama::{GpuLlama, GpuRow, Stage};
use tf_cuda::Gpu;
use tf_families::ModelPlan;
use tf_formats::checkpoint::Checkpoint;
use tf_models::{LoadOptions, Row};

const PROMPT: [u32; 5] = [504, 3575, 282, 4649, 314];

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

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("tf-cuda-llama: {e}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<bool, Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = PathBuf::from(
        args.first()
            .ok_or("usage: tf-cuda-llama MODEL [--steps N] [--bench N]")?,
    );
    let steps = arg(&args, "--steps", 40);
    let bench = arg(&args, "--bench", 256);
    let gpu = Gpu::open(0)?;
    println!(
        "device: {} ({}), kernels {:?} in {:.2} s",
        gpu.info().name,
        gpu.info().arch,
        gpu.info().ptx_origin,
        gpu.info().load_time.as_secs_f64()
    );
    let ck = Checkpoint::open(&path)?;
    let ModelPlan::Llama(plan) =
        tf_families::plan(ck.config(), ck.entries()).map_err(|r| format!("{r:?}"))?
    else {
        return Err("not a llama checkpoint".into());
    };
    let capacity = PROMPT.len() + steps + bench + 8;
    let t0 = Instant::now();
    let mut g = GpuLlama::new(gpu, &ck, &plan, 64, capacity, 64)?;
    println!(
        "weights on the GPU: {} bytes read per step, uploaded in {:.2} s",
        g.weight_bytes(),
        t0.elapsed().as_secs_f64()
    );
    let mut cpu = tf_models::load(&path, &LoadOptions::default())?;
    let vocab = g.vocab_size();
    let mut ok = true;

    // 1. Fidelity, teacher-forced on the CPU's greedy tokens, one row per step.
    let mut state = cpu.new_state();
    let (mut cl, mut gl) = (Vec::new(), Vec::new());
    let mut seq: Vec<u32> = PROMPT.to_vec();
    let (mut max_d, mut top1, mut identical, mut n_steps) = (0f64, 0usize, 0usize, 0usize);
    let mut gpu_serial: Vec<Vec<f32>> = Vec::new();
    let mut pos = 0;
    while pos < seq.len() {
        let tok = seq[pos];
        cpu.forward(
            &[Row {
                stream: 0,
                pos,
                token: tok,
                logits: true,
            }],
            &mut [&mut state],
            &mut cl,
        )?;
        g.forward(
            &[GpuRow {
                slot: 0,
                pos,
                token: tok,
                logits: true,
            }],
            &mut gl,
        )?;
        let d = cl
            .iter()
            .zip(&gl)
            .map(|(a, b)| (*a as f64 - *b as f64).abs())
            .fold(0.0, f64::max);
        max_d = max_d.max(d);
        top1 += (argmax(&cl) == argmax(&gl)) as usize;
        identical += bits_equal(&cl, &gl) as usize;
        n_steps += 1;
        gpu_serial.push(gl.clone());
        if pos + 1 == seq.len() && seq.len() < PROMPT.len() + steps {
            seq.push(argmax(&cl) as u32);
        }
        pos += 1;
    }
    println!(
        "\n## fidelity vs the CPU engine ({n_steps} positions, prompt + {steps} greedy CPU tokens)"
    );
    println!("max |dlogit| = {max_d:.3e}; top-1 agree {top1}/{n_steps}; bit-identical logits at {identical}/{n_steps} positions");
    println!("tokens: {:?}", seq);
    ok &= top1 == n_steps;

    // 2a. Chunked == serial: the prompt as one round in slot 1.
    let rows: Vec<GpuRow> = PROMPT
        .iter()
        .enumerate()
        .map(|(p, &t)| GpuRow {
            slot: 1,
            pos: p,
            token: t,
            logits: true,
        })
        .collect();
    g.forward(&rows, &mut gl)?;
    let chunked =
        (0..PROMPT.len()).all(|i| bits_equal(&gl[i * vocab..(i + 1) * vocab], &gpu_serial[i]));
    // 2b. Concurrent == solo: slots 2..6 fed the sequence together, one row each per round.
    let mut concurrent = true;
    for (p, &t) in seq.iter().enumerate().take(12) {
        let rows: Vec<GpuRow> = (2..6)
            .map(|s| GpuRow {
                slot: s,
                pos: p,
                token: t,
                logits: true,
            })
            .collect();
        g.forward(&rows, &mut gl)?;
        concurrent &= (0..4).all(|i| bits_equal(&gl[i * vocab..(i + 1) * vocab], &gpu_serial[p]));
    }
    // 2c. Graphed == eager: slot 6 through the graph.
    let mut graphed = true;
    for (p, &t) in seq.iter().enumerate().take(12) {
        g.forward_graphed(
            &[GpuRow {
                slot: 6,
                pos: p,
                token: t,
                logits: true,
            }],
            &mut gl,
        )?;
        graphed &= bits_equal(&gl, &gpu_serial[p]);
    }
    println!("\n## exactness on the GPU (bit for bit)");
    println!("chunked prompt (5 rows) == serial: {chunked}; 4 concurrent slots == solo (12 rounds): {concurrent}; graphed == eager (12 steps): {graphed}");
    ok &= chunked && concurrent && graphed;

    // 3. Speed.
    println!("\n## decode speed ({bench} steps after a {}-token prompt; each step uploads the round and downloads the logits)", PROMPT.len());
    let roofline_s = g.weight_bytes() as f64 / 3.97e12;
    println!(
        "roofline: {} bytes / 3.97 TB/s = {:.1} us per step",
        g.weight_bytes(),
        roofline_s * 1e6
    );
    println!("| mode | streams | tok/s (aggregate) | us per step | roofline fraction |\n| --- | ---: | ---: | ---: | ---: |");
    for (mode, streams) in [
        ("eager", 1usize),
        ("graphed", 1),
        ("graphed", 4),
        ("graphed", 16),
        ("graphed", 64),
    ] {
        for s in 0..streams {
            g.reset_slot(s);
        }
        // Prompt, one token per stream per round.
        let mut p = 0;
        for &t in &PROMPT {
            let rows: Vec<GpuRow> = (0..streams)
                .map(|s| GpuRow {
                    slot: s,
                    pos: p,
                    token: t,
                    logits: true,
                })
                .collect();
            g.forward(&rows, &mut gl)?;
            p += 1;
        }
        let mut next: Vec<u32> = (0..streams)
            .map(|i| argmax(&gl[i * vocab..(i + 1) * vocab]) as u32)
            .collect();
        let t = Instant::now();
        for _ in 0..bench {
            let rows: Vec<GpuRow> = (0..streams)
                .map(|s| GpuRow {
                    slot: s,
                    pos: p,
                    token: next[s],
                    logits: true,
                })
                .collect();
            if mode == "graphed" {
                g.forward_graphed(&rows, &mut gl)?;
            } else {
                g.forward(&rows, &mut gl)?;
            }
            for (s, nx) in next.iter_mut().enumerate() {
                *nx = argmax(&gl[s * vocab..(s + 1) * vocab]) as u32;
            }
            p += 1;
        }
        let dt = t.elapsed().as_secs_f64() / bench as f64;
        println!(
            "| {mode} | {streams} | {:.0} | {:.1} | {:.3} |",
            streams as f64 / dt,
            dt * 1e6,
            roofline_s / dt
        );
    }
    // 4. Where a step's device time goes: each stage alone (all layers) as a replayed graph.
    println!(
        "\n## device time per stage (graph replays, CUDA events; 1 row and 64 rows at position {})",
        PROMPT.len() + bench
    );
    println!("| stage | launches | us (1 row) | us (64 rows) |\n| --- | ---: | ---: | ---: |");
    let p = PROMPT.len() + bench;
    let one = g.profile(
        &[GpuRow {
            slot: 0,
            pos: p,
            token: 42,
            logits: true,
        }],
        50,
    )?;
    let many_rows: Vec<GpuRow> = (0..64)
        .map(|s| GpuRow {
            slot: s,
            pos: if s == 0 { p + 1 } else { p },
            token: 42,
            logits: true,
        })
        .collect();
    let many = g.profile(&many_rows, 20).ok();
    for (i, (stage, us)) in one.iter().enumerate() {
        let launches = match stage {
            Some(Stage::Embed) | Some(Stage::Head) => "1".to_string(),
            Some(_) => "30".to_string(),
            None => "whole step".to_string(),
        };
        let m = many
            .as_ref()
            .map_or("-".to_string(), |v| format!("{:.1}", v[i].1));
        println!(
            "| {} | {launches} | {us:.1} | {m} |",
            stage.map_or("all".to_string(), |s| format!("{s:?}"))
        );
    }
    println!("\n{}", if ok { "PASS" } else { "FAIL" });
    Ok(ok)
}
