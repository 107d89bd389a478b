//! Sizing a Muse Spark text model from its config alone: parameters (total, active per token)
//! and weight bytes per tensor-parallel rank at a given number of bits per weight.
//!
//! Counts follow the tensors the plan requires (HF form): per layer q, k, v, output gate and o
//! projections; the router (f32) and its bias; pre/post expert projections; `E` experts of
//! gate, up `[I, C]` and down `[C, I]`; the norms and residual gates; then embeddings, the final
//! norm and the head.
//!
//! Tensor-parallel split (as mlx-lm's `shard` does): attention heads (q, k, v, gate rows; o
//! columns), each expert's intermediate width, and the head's vocabulary rows are divided among
//! the ranks; the embeddings, the router, the pre/post expert projections and every norm are
//! replicated on each rank.
//!
//! Bytes: the matrices (attention, experts, expert projections, embeddings, head) at the given
//! bits per weight; the router and its bias in f32; norms and residual gates in bf16.
//!
//! The Muse Spark Open config used with this (fixtures/muse_spark/open-816b/config.json) is
//! written from public descriptions (NVIDIA NeMo's model page and config defaults, mlx-lm's
//! muse_spark.py). Guessed there: `moe_intermediate_size` = 4096 (not found published; it makes
//! the totals 816.7B and 42.8B active without embeddings and head, as the name 816B-A42B says),
//! `final_logit_softcapping` and `routed_scaling_factor` (no effect on sizes).

use super::config::{parse, MuseSparkConfig};
use crate::refusal::Refusal;
use serde::Serialize;
use serde_json::Value;

/// Parameter counts of a Muse Spark text model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MuseParams {
    /// Attention matrices, all layers.
    pub attention: u64,
    /// Routed experts, all layers.
    pub experts: u64,
    /// Pre/post expert projections, all layers.
    pub expert_projections: u64,
    /// Router weights and score biases (kept f32).
    pub router: u64,
    /// Norm gains and residual gates (kept bf16).
    pub norms: u64,
    /// Token embeddings.
    pub embeddings: u64,
    /// Output head.
    pub head: u64,
    /// Expert parameters one token reads (top-k experts per layer).
    pub active_experts: u64,
}

impl MuseParams {
    /// Every parameter.
    pub fn total(&self) -> u64 {
        self.attention
            + self.experts
            + self.expert_projections
            + self.router
            + self.norms
            + self.embeddings
            + self.head
    }

    /// Every parameter except embeddings and head (how MoE totals are often quoted).
    pub fn total_without_embeddings(&self) -> u64 {
        self.total() - self.embeddings - self.head
    }

    /// Parameters one token reads (all but the unpicked experts; one embedding row not counted
    /// apart: the whole embedding matrix is counted).
    pub fn active(&self) -> u64 {
        self.total() - self.experts + self.active_experts
    }

    /// Active parameters without embeddings and head.
    pub fn active_without_embeddings(&self) -> u64 {
        self.active() - self.embeddings - self.head
    }
}

/// Parameter counts from a parsed config.
pub fn params(c: &MuseSparkConfig) -> MuseParams {
    let (h, d, l) = (c.hidden_size, c.head_dim, c.num_hidden_layers);
    let (q, kv) = (c.num_attention_heads * d, c.num_key_value_heads * d);
    let (e, k) = (c.num_local_experts, c.num_experts_per_tok);
    let (cw, i) = (c.moe_hidden_size, c.moe_intermediate_size);
    let expert = 3 * i * cw;
    MuseParams {
        attention: l * (2 * q * h + 2 * kv * h + h * q),
        experts: l * e * expert,
        expert_projections: l * 2 * cw * h,
        router: l * (e * h + e),
        // input, pre-ffn, post-ffn norms and two residual gates per layer, the two expert
        // norms, and the final norm.
        norms: l * (5 * h + 2 * cw) + h,
        embeddings: c.vocab_size * h,
        head: c.vocab_size * h,
        active_experts: l * k * expert,
    }
}

/// Weight bytes of one tensor-parallel rank.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RankShare {
    /// Ranks.
    pub tp: u32,
    /// Bits per weight of the quantized matrices.
    pub bits: f64,
    /// Bytes of the whole model at these bits.
    pub total_bytes: u64,
    /// Bytes one rank holds (its shard plus everything replicated).
    pub per_rank_bytes: u64,
}

/// Why a split is not possible.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizingError {
    /// The ranks do not divide a dimension that is split.
    #[error("{tp} ranks do not divide {what} ({value})")]
    Indivisible {
        tp: u32,
        what: &'static str,
        value: u64,
    },
    /// A rank count of 0 or a bits figure that is not positive.
    #[error("bad sizing request: {0}")]
    BadRequest(String),
}

fn bytes(params: f64, bits: f64) -> f64 {
    params * bits / 8.0
}

/// The share of each rank for `tp` ranks at `bits` per quantized weight.
pub fn rank_share(c: &MuseSparkConfig, tp: u32, bits: f64) -> Result<RankShare, SizingError> {
    if tp == 0 || !(bits.is_finite() && bits > 0.0) {
        return Err(SizingError::BadRequest(format!("tp {tp}, bits {bits}")));
    }
    let n = tp as u64;
    for (what, value) in [
        ("num_key_value_heads", c.num_key_value_heads),
        ("num_attention_heads", c.num_attention_heads),
        ("moe_intermediate_size", c.moe_intermediate_size),
        ("vocab_size", c.vocab_size),
    ] {
        if value % n != 0 {
            return Err(SizingError::Indivisible { tp, what, value });
        }
    }
    let p = params(c);
    let split = (p.attention + p.experts + p.head) as f64;
    let replicated_q = (p.embeddings + p.expert_projections) as f64;
    let fixed = (p.router * 4 + p.norms * 2) as f64;
    let total = bytes(split + replicated_q, bits) + fixed;
    let per_rank = bytes(split / n as f64 + replicated_q, bits) + fixed;
    Ok(RankShare {
        tp,
        bits,
        total_bytes: total.ceil() as u64,
        per_rank_bytes: per_rank.ceil() as u64,
    })
}

/// Sizing of a model: its parameters and a table of rank shares.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MuseSizing {
    /// Parameter counts.
    pub params: MuseParams,
    /// One entry per (bits, tp) asked for, in the order asked.
    pub shares: Vec<RankShare>,
    /// Sliding-window layers, full-attention layers, and the window.
    pub layers_sliding: u64,
    pub layers_full: u64,
    pub sliding_window: u64,
    /// f32 KV bytes per token of context on full layers, and the most a stream's sliding layers
    /// hold (one window).
    pub kv_bytes_per_token_full: u64,
    pub kv_bytes_sliding_max: u64,
}

/// Sizes a Muse Spark config.json (no tensors needed) for every `bits` × `tps` pair.
pub fn sizing(config: &Value, tps: &[u32], bits: &[f64]) -> Result<MuseSizing, SizingOrRefusal> {
    let c = parse(config).map_err(SizingOrRefusal::Refused)?;
    let mut shares = Vec::new();
    for &b in bits {
        for &tp in tps {
            shares.push(rank_share(&c, tp, b).map_err(SizingOrRefusal::Sizing)?);
        }
    }
    let sliding = c.layer_sliding.iter().filter(|s| **s).count() as u64;
    let kv_token = 2 * c.num_key_value_heads * c.head_dim * 4;
    Ok(MuseSizing {
        params: params(&c),
        shares,
        layers_sliding: sliding,
        layers_full: c.num_hidden_layers - sliding,
        sliding_window: c.sliding_window,
        kv_bytes_per_token_full: kv_token * (c.num_hidden_layers - sliding),
        kv_bytes_sliding_max: kv_token * sliding * c.sliding_window,
    })
}

/// A config the family refuses, or a split that is not possible.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SizingOrRefusal {
    /// The config is refused.
    #[error("{0}")]
    Refused(Refusal),
    /// The split is not possible.
    #[error(transparent)]
    Sizing(#[from] SizingError),
}

impl std::fmt::Display for MuseSizing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = &self.params;
        let b = |x: u64| x as f64 / 1e9;
        writeln!(
            f,
            "parameters: {:.1}B total ({:.1}B without embeddings and head), {:.1}B active per token ({:.1}B without)",
            b(p.total()),
            b(p.total_without_embeddings()),
            b(p.active()),
            b(p.active_without_embeddings())
        )?;
        writeln!(
            f,
            "  attention {:.1}B, experts {:.1}B, expert projections {:.1}B, router {:.2}B, embeddings {:.2}B, head {:.2}B",
            b(p.attention),
            b(p.experts),
            b(p.expert_projections),
            b(p.router),
            b(p.embeddings),
            b(p.head)
        )?;
        writeln!(
            f,
            "layers: {} sliding (window {}), {} full; f32 KV: {:.1} KiB per token (full layers) + up to {:.1} MiB (sliding)",
            self.layers_sliding,
            self.sliding_window,
            self.layers_full,
            self.kv_bytes_per_token_full as f64 / 1024.0,
            self.kv_bytes_sliding_max as f64 / (1024.0 * 1024.0)
        )?;
        writeln!(
            f,
            "{:>6} {:>4} {:>12} {:>14}",
            "bits", "tp", "weights GB", "per rank GB"
        )?;
        for s in &self.shares {
            writeln!(
                f,
                "{:>6} {:>4} {:>12.1} {:>14.1}",
                s.bits,
                s.tp,
                s.total_bytes as f64 / 1e9,
                s.per_rank_bytes as f64 / 1e9
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn fixture(sub: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures/muse_spark")
            .join(sub)
    }

    #[test]
    fn counts_equal_the_tiny_fixtures_tensors() {
        let ck = tf_formats::checkpoint::Checkpoint::open(&fixture("hf-f32")).unwrap();
        let c = parse(ck.config()).unwrap();
        let p = params(&c);
        let stored: u64 = ck.entries().iter().map(|e| e.elements()).sum();
        assert_eq!(p.total(), stored);
        // Planted control: one expert fewer is caught.
        let mut fewer = c.clone();
        fewer.num_local_experts -= 1;
        assert_ne!(params(&fewer).total(), stored);
    }

    #[test]
    fn open_816b_matches_the_published_totals() {
        let text = std::fs::read_to_string(fixture("open-816b/config.json")).unwrap();
        let cfg: Value = serde_json::from_str(&text).unwrap();
        let s = sizing(&cfg, &[1, 2, 4, 8], &[4.0, 1.8]).unwrap();
        let p = s.params;
        // 816B total and 42B active, counted without embeddings and head, within 1%.
        let near = |x: u64, want: f64| (x as f64 / 1e9 - want).abs() / want < 0.01;
        assert!(
            near(p.total_without_embeddings(), 816.0),
            "{}",
            p.total_without_embeddings()
        );
        let active = p.active_without_embeddings() as f64 / 1e9;
        assert!((42.0..43.5).contains(&active), "{active}");
        assert_eq!((s.layers_sliding, s.layers_full), (46, 16));
        assert_eq!(s.shares.len(), 8);
        let one = s.shares[0];
        assert_eq!(one.total_bytes, one.per_rank_bytes);
        for w in s.shares[..4].windows(2) {
            assert!(w[1].per_rank_bytes < w[0].per_rank_bytes);
        }
        assert!(matches!(
            rank_share(&parse(&cfg).unwrap(), 3, 4.0),
            Err(SizingError::Indivisible { .. })
        ));
    }
}
