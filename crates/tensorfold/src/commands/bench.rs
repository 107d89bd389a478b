//! `tensorfold bench`: prefill and decode speed on a synthetic prompt.

use crate::model_args::ModelArgs;
use clap::Parser;
use std::process::ExitCode;
use tf_engine::generate::{generate, GenerateRequest};
use tf_engine::sampler::SamplingParams;

/// Arguments of `tensorfold bench`.
#[derive(Parser)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Prompt length (token ids spread deterministically over the vocabulary).
    #[arg(long, default_value_t = 512)]
    pub prompt_tokens: usize,
    /// Tokens to decode (greedy): timed from an empty context as llama-bench's tg test does
    /// (`decode_tok_s`), and after the prompt (`decode_after_prompt_tok_s`).
    #[arg(long, default_value_t = 128)]
    pub gen_tokens: usize,
    /// Repetitions; the median of each figure is reported.
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// Also time decode rounds of this many streams at once (comma-separated levels, e.g.
    /// 1,4,16,64): every stream gets one row per round, so a round reads the weights once.
    #[arg(long, value_delimiter = ',')]
    pub streams: Vec<usize>,
    /// Measure a synthetic checkpoint instead of MODEL: a config (a name such as lightning,
    /// bolt, llama3-8b, smollm2-135m, a config.json path or its directory) whose weights are
    /// random values in a quantized layout, generated directly in GPU memory (CUDA only).
    /// `CONFIG:LAYOUT` picks the layout, e.g. `llama3-8b:q4_0` or `lightning:mlx4g64`.
    #[arg(long, value_name = "CONFIG[:LAYOUT]")]
    pub synthetic: Option<String>,
    /// Print one JSON object (prefill_tok_s, decode_tok_s, ttft_ms, peak_rss_bytes) on the last line.
    #[arg(long)]
    pub json: bool,
}

/// Peak resident memory of this process (VmHWM), in bytes.
fn peak_rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Runs `tensorfold bench`.
pub fn main(args: Args) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(args.prompt_tokens > 0, "--prompt-tokens must be at least 1");
    anyhow::ensure!(args.repeat > 0, "--repeat must be at least 1");
    let streams = args.streams.iter().copied().max().unwrap_or(1);
    // Room for the prompt and the generated tokens (and the multi-stream rounds' tokens).
    let context = args.prompt_tokens + args.gen_tokens + 2;
    let mut model = match &args.synthetic {
        Some(spec) => {
            crate::model_args::load_synthetic(spec, args.model.backend, streams, context)?
        }
        None => args.model.load(streams, Some(context))?,
    };
    let vocab = model.info().vocab_size as u64;
    // A fixed, spread-out token sequence (multiplicative hashing), the same every run.
    let prompt: Vec<u32> = (0..args.prompt_tokens as u64)
        .map(|i| ((i * 2_654_435_761 + 17) % vocab) as u32)
        .collect();
    let run = |model: &mut dyn tf_models::Model, prompt: &[u32], gen: usize| {
        let req = GenerateRequest {
            prompt: prompt.to_vec(),
            params: SamplingParams::default(),
            max_tokens: gen + 1,
            stop_ids: Vec::new(),
        };
        let mut first = None;
        let start = std::time::Instant::now();
        let out = generate(model, &req, |_| {
            first.get_or_insert_with(|| start.elapsed());
            true
        })?;
        let forwards = out.generated.len().saturating_sub(1) as f64;
        let decode = forwards / out.decode_time.as_secs_f64().max(1e-9);
        let prefill = prompt.len() as f64 / out.prefill_time.as_secs_f64();
        let ttft = first.map_or(0.0, |d| d.as_secs_f64() * 1e3);
        anyhow::Ok((prefill, decode, ttft))
    };
    let (mut prefill, mut decode, mut decode_after, mut ttft) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..args.repeat {
        let (p, d, t) = run(model.as_mut(), &prompt, args.gen_tokens)?;
        prefill.push(p);
        decode_after.push(d);
        ttft.push(t);
        // Decode from an empty context (one token of prompt), as llama-bench's tg test runs.
        decode.push(run(model.as_mut(), &prompt[..1], args.gen_tokens)?.1);
    }
    let (p, d, da, t) = (
        median(prefill),
        median(decode),
        median(decode_after),
        median(ttft),
    );
    let mut levels = Vec::new();
    for &n in &args.streams {
        anyhow::ensure!(
            (1..=256).contains(&n),
            "--streams takes levels between 1 and 256"
        );
        let tok_s = decode_streams(model.as_mut(), n, args.gen_tokens.max(1))?;
        let weights = model.info().weight_bytes as f64;
        println!(
            "decode {n} streams: {tok_s:.1} tok/s aggregate, {:.1} rounds/s, weights {:.1} GB/s",
            tok_s / n as f64,
            weights * tok_s / n as f64 / 1e9
        );
        levels.push(serde_json::json!({"streams": n, "decode_tok_s": tok_s}));
    }
    let rss = peak_rss_bytes();
    println!(
        "prefill {p:.1} tok/s ({} tokens), decode {d:.1} tok/s ({} tokens from an empty context; \
         {da:.1} tok/s after the prompt), ttft {t:.1} ms, peak RSS {:.1} MiB",
        args.prompt_tokens,
        args.gen_tokens,
        rss as f64 / (1 << 20) as f64
    );
    if args.json {
        let json = serde_json::json!({
            "prefill_tok_s": p, "decode_tok_s": d, "decode_after_prompt_tok_s": da,
            "ttft_ms": t, "peak_rss_bytes": rss,
            "prompt_tokens": args.prompt_tokens, "gen_tokens": args.gen_tokens,
            "threads": args.model.threads, "streams": levels,
            "weight_bytes": model.info().weight_bytes,
        });
        println!("{json}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Aggregate decode tok/s of `n` streams stepping together for `steps` rounds (greedy: each
/// stream feeds back the sampler's greedy pick, from the row's candidates where the model
/// offers them, as the server does), after a one-token prompt each.
fn decode_streams(model: &mut dyn tf_models::Model, n: usize, steps: usize) -> anyhow::Result<f64> {
    use tf_engine::sampler::{argmax, sample_candidates};
    use tf_models::{Row, StreamState};
    let vocab = model.info().vocab_size;
    let mut states: Vec<StreamState> = (0..n).map(|_| model.new_state()).collect();
    let mut next: Vec<u32> = (0..n as u32).map(|i| 1 + i * 7919 % vocab as u32).collect();
    let mut logits = Vec::new();
    let mut candidates = Vec::new();
    let mut round = |states: &mut Vec<StreamState>, next: &mut Vec<u32>| -> anyhow::Result<()> {
        let rows: Vec<Row> = (0..n)
            .map(|i| Row {
                stream: i,
                pos: states[i].len,
                token: next[i],
                logits: true,
            })
            .collect();
        let mut refs: Vec<&mut StreamState> = states.iter_mut().collect();
        if model.candidate_capacity() == 0 {
            model.forward(&rows, &mut refs, &mut logits)?;
            for (i, t) in next.iter_mut().enumerate() {
                *t = argmax(&logits[i * vocab..(i + 1) * vocab]);
            }
            return Ok(());
        }
        // As the server samples on such a model: from each row's candidates, the whole row
        // only when they do not decide the pick.
        model.forward_candidates(&rows, &mut refs, &[], &mut candidates)?;
        let greedy = SamplingParams::default();
        for (i, t) in next.iter_mut().enumerate() {
            let pos = rows[i].pos as u64;
            *t = match sample_candidates(
                &candidates[i],
                &[],
                vocab,
                &greedy,
                Default::default(),
                pos,
            ) {
                Some(t) => t,
                None => {
                    model.candidate_row(i, &mut logits)?;
                    argmax(&logits)
                }
            };
        }
        Ok(())
    };
    // Warm-up round (first-use costs such as CUDA graph capture), not timed.
    round(&mut states, &mut next)?;
    let start = std::time::Instant::now();
    for _ in 0..steps {
        round(&mut states, &mut next)?;
    }
    Ok((n * steps) as f64 / start.elapsed().as_secs_f64().max(1e-9))
}
