//! One stream, start to finish: chunked prefill, then keyed sampling token by token.

use crate::sampler::{
    candidates_may_decide, penalised_ids, sample, sample_candidates, PenaltyHistory, SamplingParams,
};
use std::time::{Duration, Instant};
use tf_models::{Model, ModelError, Row, RowCandidates, RowWant};

/// Prompt rows per prefill round: a fixed grid, so a prompt's chunk plan depends only on its
/// tokens.
pub const PREFILL_CHUNK: usize = 512;

/// What to generate.
#[derive(Debug, Clone)]
pub struct GenerateRequest {
    /// Prompt token ids (non-empty).
    pub prompt: Vec<u32>,
    /// Sampling settings (seed included).
    pub params: SamplingParams,
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// Token ids that end the reply (not included in it).
    pub stop_ids: Vec<u32>,
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// A stop token, or the caller asked to stop (a stop string).
    Stop,
    /// `max_tokens` or the context length was reached.
    Length,
}

/// The reply and its timings.
#[derive(Debug, Clone)]
pub struct GenerateOutput {
    pub generated: Vec<u32>,
    pub finish: FinishReason,
    pub prefill_time: Duration,
    pub decode_time: Duration,
}

/// Errors of generation.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error("the prompt is empty: nothing to condition on")]
    EmptyPrompt,
    #[error("the prompt has {prompt} tokens but the context holds {context}")]
    PromptTooLong { prompt: usize, context: usize },
    #[error(transparent)]
    Model(#[from] ModelError),
}

/// Generates a reply; `on_token` sees each token and returns false to stop (finish: Stop).
/// Decode rounds of a model with a candidate selection ([`Model::candidate_capacity`]) take
/// their draws from the candidates where these decide them, as the scheduler does (the same
/// tokens), and read the whole row only where they do not.
pub fn generate(
    model: &mut dyn Model,
    req: &GenerateRequest,
    mut on_token: impl FnMut(u32) -> bool,
) -> Result<GenerateOutput, GenerateError> {
    let context = model.info().context;
    if req.prompt.is_empty() {
        return Err(GenerateError::EmptyPrompt);
    }
    if req.prompt.len() >= context {
        return Err(GenerateError::PromptTooLong {
            prompt: req.prompt.len(),
            context,
        });
    }
    let vocab = model.info().vocab_size;
    let mut state = model.new_state();
    let mut logits = Vec::new();
    let start = Instant::now();
    for (c, part) in req.prompt.chunks(PREFILL_CHUNK).enumerate() {
        let last_chunk = (c + 1) * PREFILL_CHUNK >= req.prompt.len();
        let rows: Vec<Row> = part
            .iter()
            .enumerate()
            .map(|(i, &token)| Row {
                stream: 0,
                pos: c * PREFILL_CHUNK + i,
                token,
                logits: last_chunk && i + 1 == part.len(),
            })
            .collect();
        model.forward(&rows, &mut [&mut state], &mut logits)?;
    }
    let prefill_time = start.elapsed();
    let start = Instant::now();
    let mut generated = Vec::new();
    let mut finish = FinishReason::Length;
    let cap = model.candidate_capacity();
    let by_candidates = cap > 0 && candidates_may_decide(&req.params, cap);
    // The latest decode round's candidates (empty: the draw reads `logits`).
    let mut candidates: Vec<RowCandidates> = Vec::new();
    while generated.len() < req.max_tokens {
        let pos = req.prompt.len() + generated.len();
        let history = PenaltyHistory {
            prompt: &req.prompt,
            generated: &generated,
        };
        let drawn = candidates
            .first()
            .and_then(|c| sample_candidates(c, &c.extra, vocab, &req.params, history, pos as u64));
        let token = match drawn {
            Some(t) => t,
            None => {
                if !candidates.is_empty() {
                    model.candidate_row(0, &mut logits)?;
                }
                sample(&mut logits[..vocab], &req.params, history, pos as u64).token
            }
        };
        if req.stop_ids.contains(&token) {
            finish = FinishReason::Stop;
            break;
        }
        generated.push(token);
        if !on_token(token) {
            finish = FinishReason::Stop;
            break;
        }
        if generated.len() == req.max_tokens || pos + 1 >= context {
            break;
        }
        let row = Row {
            stream: 0,
            pos,
            token,
            logits: true,
        };
        if by_candidates {
            // What the next draw needs besides the candidates: its penalised tokens' logits.
            let history = PenaltyHistory {
                prompt: &req.prompt,
                generated: &generated,
            };
            let want = RowWant {
                extra: penalised_ids(&req.params, history, vocab),
                whole: false,
            };
            model.forward_candidates(&[row], &mut [&mut state], &[want], &mut candidates)?;
        } else {
            model.forward(&[row], &mut [&mut state], &mut logits)?;
        }
    }
    Ok(GenerateOutput {
        generated,
        finish,
        prefill_time,
        decode_time: start.elapsed(),
    })
}
