//! Shared helpers of the Muse Spark tests: the committed fixtures, their reference logits, and
//! runs of a model over token sequences in chunks and in concurrent rounds.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use tf_formats::safetensors::SafetensorsCheckpoint;
use tf_models::{load, LoadOptions, Model, Row, StreamState};

/// `fixtures/muse_spark/<sub>`.
pub fn fixture(sub: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/muse_spark")
        .join(sub)
}

/// The reference file: token sequences and logits.
pub struct Refs {
    st: SafetensorsCheckpoint,
}

impl Refs {
    /// Opens `fixtures/muse_spark/refs.safetensors`.
    pub fn open() -> Refs {
        Refs {
            st: SafetensorsCheckpoint::open(&fixture("refs.safetensors")).expect("refs"),
        }
    }

    /// The token sequences, `[sequences][positions]`.
    pub fn tokens(&self) -> Vec<Vec<u32>> {
        let t = self.st.tensor("tokens").expect("tokens");
        let len = t.shape[1] as usize;
        let ids: Vec<u32> = t
            .data
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes(b.try_into().unwrap()) as u32)
            .collect();
        ids.chunks(len).map(|c| c.to_vec()).collect()
    }

    /// A `[sequences, positions, vocab]` f32 tensor, flattened per sequence.
    pub fn logits(&self, name: &str) -> Vec<Vec<f32>> {
        let t = self.st.tensor(name).unwrap_or_else(|| panic!("{name}"));
        let per = (t.shape[1] * t.shape[2]) as usize;
        let all: Vec<f32> = t
            .data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        all.chunks(per).map(|c| c.to_vec()).collect()
    }
}

/// Loads a fixture directory with `threads` kernel threads.
pub fn model(path: &Path, threads: usize) -> Box<dyn Model> {
    load(path, &LoadOptions { threads }).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Logits of every position of `tokens`, fed in chunks of `chunk` rows (one stream).
pub fn run_chunked(m: &mut dyn Model, tokens: &[u32], chunk: usize) -> Vec<f32> {
    let mut st = m.new_state();
    let mut out = Vec::new();
    let mut buf = Vec::new();
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
        m.forward(&rows, &mut [&mut st], &mut buf).expect("forward");
        out.extend_from_slice(&buf);
    }
    out
}

/// Logits of several streams advanced together: each round takes `step` tokens from every
/// stream that has some left (streams start `offset * index` rounds late), all in one call.
pub fn run_concurrent(
    m: &mut dyn Model,
    seqs: &[Vec<u32>],
    step: usize,
    offset: usize,
) -> Vec<Vec<f32>> {
    let vocab = m.info().vocab_size;
    let mut states: Vec<StreamState> = seqs.iter().map(|_| m.new_state()).collect();
    let mut outs: Vec<Vec<f32>> = seqs.iter().map(|_| Vec::new()).collect();
    let mut buf = Vec::new();
    let mut round = 0;
    loop {
        let mut rows = Vec::new();
        for (s, seq) in seqs.iter().enumerate() {
            if round < offset * s {
                continue;
            }
            let done = states[s].len;
            for (i, &token) in seq.iter().enumerate().skip(done).take(step) {
                rows.push(Row {
                    stream: s,
                    pos: i,
                    token,
                    logits: true,
                });
            }
        }
        if rows.is_empty() && round >= offset * seqs.len() {
            break;
        }
        round += 1;
        if rows.is_empty() {
            continue;
        }
        // Streams' positions must be known before the call: count the rows per stream.
        let mut refs: Vec<&mut StreamState> = states.iter_mut().collect();
        m.forward(&rows, &mut refs, &mut buf).expect("forward");
        for (r, l) in rows.iter().zip(buf.chunks_exact(vocab)) {
            outs[r.stream].extend_from_slice(l);
        }
    }
    outs
}

/// Distances of `ours` from `reference` (both `[positions, vocab]`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Distance {
    /// Largest per-position KL(reference || ours), nats.
    pub kl_max: f64,
    /// Mean per-position KL.
    pub kl_mean: f64,
    /// Share of positions whose arg-max agrees.
    pub top1: f64,
    /// Largest absolute logit difference.
    pub max_abs: f64,
}

fn log_softmax(x: &[f32]) -> Vec<f64> {
    let m = x.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b as f64));
    let s: f64 = x.iter().map(|&v| (v as f64 - m).exp()).sum();
    x.iter().map(|&v| v as f64 - m - s.ln()).collect()
}

fn argmax(x: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best
}

/// Compares two `[positions, vocab]` logit arrays.
pub fn distance(ours: &[f32], reference: &[f32], vocab: usize) -> Distance {
    assert_eq!(ours.len(), reference.len(), "logit lengths");
    let (mut kl_max, mut kl_sum, mut agree, mut max_abs) = (0.0f64, 0.0, 0usize, 0.0f64);
    let n = ours.len() / vocab;
    for (o, r) in ours.chunks_exact(vocab).zip(reference.chunks_exact(vocab)) {
        let (lo, lr) = (log_softmax(o), log_softmax(r));
        let kl: f64 = lr.iter().zip(&lo).map(|(a, b)| a.exp() * (a - b)).sum();
        kl_max = kl_max.max(kl);
        kl_sum += kl;
        agree += usize::from(argmax(o) == argmax(r));
        for (a, b) in o.iter().zip(r) {
            max_abs = max_abs.max((*a as f64 - *b as f64).abs());
        }
    }
    Distance {
        kl_max,
        kl_mean: kl_sum / n as f64,
        top1: agree as f64 / n as f64,
        max_abs,
    }
}

/// The worst distance over all sequences.
pub fn worst(ds: &[Distance]) -> Distance {
    ds.iter().fold(
        Distance {
            kl_max: 0.0,
            kl_mean: 0.0,
            top1: 1.0,
            max_abs: 0.0,
        },
        |a, d| Distance {
            kl_max: a.kl_max.max(d.kl_max),
            kl_mean: a.kl_mean.max(d.kl_mean),
            top1: a.top1.min(d.top1),
            max_abs: a.max_abs.max(d.max_abs),
        },
    )
}
