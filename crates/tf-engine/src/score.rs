//! Teacher-forced logits for a token sequence, in any chunking: every mode gives the same bits.

use tf_models::{Model, ModelError, Row};

/// How the sequence is fed to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScoreMode {
    /// All tokens in one round.
    Full,
    /// One token per round.
    Serial,
    /// Rounds of at most N tokens.
    Chunk(usize),
}

impl std::str::FromStr for ScoreMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "full" => Ok(ScoreMode::Full),
            "serial" => Ok(ScoreMode::Serial),
            _ => match s.strip_prefix("chunk:").map(str::parse::<usize>) {
                Some(Ok(n)) if n > 0 => Ok(ScoreMode::Chunk(n)),
                _ => Err(format!(
                    "mode must be full, serial or chunk:N with N > 0, not {s:?}"
                )),
            },
        }
    }
}

/// Logits `[tokens.len(), vocab]` of every position of `tokens`, teacher-forced.
pub fn score(
    model: &mut dyn Model,
    tokens: &[u32],
    mode: ScoreMode,
) -> Result<Vec<f32>, ModelError> {
    let chunk = match mode {
        ScoreMode::Full => tokens.len().max(1),
        ScoreMode::Serial => 1,
        ScoreMode::Chunk(n) => n,
    };
    let vocab = model.info().vocab_size;
    let mut state = model.new_state();
    let mut all = Vec::with_capacity(tokens.len() * vocab);
    let mut logits = Vec::new();
    for (c, part) in tokens.chunks(chunk).enumerate() {
        let rows: Vec<Row> = part
            .iter()
            .enumerate()
            .map(|(i, &token)| Row {
                stream: 0,
                pos: c * chunk + i,
                token,
                logits: true,
            })
            .collect();
        model.forward(&rows, &mut [&mut state], &mut logits)?;
        all.extend_from_slice(&logits);
    }
    Ok(all)
}
