//! `tensorfold run`: one reply to one prompt, streamed to stdout.

use crate::model_args::ModelArgs;
use crate::text::ModelText;
use clap::Parser;
use std::io::Write;
use std::process::ExitCode;
use tf_engine::generate::{generate, FinishReason, GenerateRequest};
use tf_engine::sampler::{seed_from_prompt, SamplingParams};
use tf_tokenize::StreamDecoder;

/// Arguments of `tensorfold run`.
#[derive(Parser)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The prompt: a user message (rendered with the model's chat template) unless --raw.
    #[arg(long)]
    pub prompt: String,
    /// Feed the prompt as plain text, without the chat template.
    #[arg(long)]
    pub raw: bool,
    /// Most tokens to generate.
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// Nucleus sampling: keep the most likely tokens up to this probability mass.
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// Keep only the K most likely tokens (0 = off).
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    /// Seed of the keyed sampler (default: derived from the prompt tokens).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Print one JSON object (prompt_ids, generated_ids, text, timings) on the last line.
    #[arg(long)]
    pub json: bool,
}

/// Runs `tensorfold run`.
pub fn main(args: Args) -> anyhow::Result<ExitCode> {
    let path = args.model.path()?;
    let text = ModelText::load(&path)?;
    let prompt = if args.raw {
        text.tokenizer.encode(&args.prompt, true)?
    } else {
        text.chat_prompt(&args.prompt)?
    };
    let mut model = args.model.load(1, None)?;
    let params = SamplingParams {
        temperature: args.temperature,
        top_p: args.top_p,
        top_k: args.top_k,
        seed: args.seed.unwrap_or_else(|| seed_from_prompt(&prompt)),
        ..Default::default()
    };
    let req = GenerateRequest {
        prompt: prompt.clone(),
        params,
        max_tokens: args.max_tokens,
        stop_ids: text.tokenizer.eos_ids().to_vec(),
    };
    let mut decoder = StreamDecoder::new(&text.tokenizer, true);
    let mut reply = String::new();
    let mut stdout = std::io::stdout();
    let out = generate(model.as_mut(), &req, |id| {
        if let Ok(delta) = decoder.push(id) {
            reply.push_str(&delta);
            let _ = stdout.write_all(delta.as_bytes());
            let _ = stdout.flush();
        }
        true
    })?;
    let tail = decoder.finish()?;
    reply.push_str(&tail);
    println!("{tail}");
    if args.json {
        let decode_s = out.decode_time.as_secs_f64();
        let json = serde_json::json!({
            "prompt_ids": prompt,
            "generated_ids": out.generated,
            "text": reply,
            "finish_reason": match out.finish { FinishReason::Stop => "stop", FinishReason::Length => "length" },
            "timings": {
                "prefill_ms": out.prefill_time.as_secs_f64() * 1e3,
                "decode_ms": decode_s * 1e3,
                "prefill_tok_s": prompt.len() as f64 / out.prefill_time.as_secs_f64(),
                "decode_tok_s": if decode_s > 0.0 { out.generated.len().saturating_sub(1) as f64 / decode_s } else { 0.0 },
            }
        });
        println!("{json}");
    }
    Ok(ExitCode::SUCCESS)
}
