//! Sizing summary of a plan (what `tensorfold info` prints): layers by type, parameters total
//! and active per token, formats and bytes per tensor class, per-stream memory at a context.

use crate::formats::{matrix_kernel, KernelPath};
use crate::index::TensorClass;
use crate::nemotron_h::NemotronBlock;
use crate::ModelPlan;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use tf_formats::TensorEntry;

/// Bytes per element of the KV cache and recurrent (conv/SSM) state: the exact engine keeps
/// them in f32 (no lossy KV cache).
pub const STATE_ELEMENT_BYTES: u64 = 4;

/// How many layers of one kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LayerCount {
    /// Layer kind ("attention+mlp", "mamba", "moe", "sliding-attention+moe", ...).
    pub kind: String,
    /// Number of such layers.
    pub count: usize,
}

/// Formats, parameters and bytes of one tensor class.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClassSummary {
    /// Class label ("embedding", "attention", "routed-experts", "norms", "head", ...).
    pub class: String,
    /// Distinct storage formats, sorted.
    pub formats: Vec<String>,
    /// Number of tensors.
    pub tensors: usize,
    /// Logical parameters.
    pub params: u64,
    /// Stored bytes.
    pub bytes: u64,
}

/// Per-stream memory at a context length (KV cache plus Mamba state), in bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StreamMemory {
    /// Context length sized for.
    pub context: u64,
    /// Bytes per element of KV and state.
    pub element_bytes: u64,
    /// KV bytes per token over all attention layers (full-attention rate).
    pub kv_bytes_per_token: u64,
    /// KV bytes at `context` (sliding layers capped at their window).
    pub kv_bytes: u64,
    /// Mamba conv state bytes (independent of context).
    pub conv_state_bytes: u64,
    /// Mamba SSM state bytes (independent of context).
    pub ssm_state_bytes: u64,
    /// Sum of the above.
    pub total_bytes: u64,
}

/// One MoE layer's routing shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MoeLayer {
    /// Layer index.
    pub layer: usize,
    /// Routed experts.
    pub experts: u64,
    /// Experts chosen per token.
    pub top_k: u64,
    /// Hidden width of each routed expert.
    pub width: u64,
}

/// What `tensorfold info` prints about a validated checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Family name.
    pub family: String,
    /// config.json model_type.
    pub model_type: String,
    /// Layers by kind, in order of first appearance.
    pub layers: Vec<LayerCount>,
    /// Rows of the embedding table.
    pub vocab_size: u64,
    /// Width of the residual stream.
    pub hidden_size: u64,
    /// Each MoE layer's own routing (per-layer for Puzzle checkpoints).
    pub moe_layers: Vec<MoeLayer>,
    /// Logical parameters of the tensors the plan uses (a tied head counted once).
    pub params_total: u64,
    /// Parameters used per token (routed experts counted top-k of each layer's own count).
    pub params_active: u64,
    /// Per tensor class.
    pub classes: Vec<ClassSummary>,
    /// Stored bytes of all tensors in the index.
    pub weight_bytes: u64,
    /// Stored bytes of the tensors the plan uses.
    pub planned_bytes: u64,
    /// Tensors present but unused.
    pub ignored_tensors: usize,
    /// Whether the output head reuses the embedding table.
    pub head_tied: bool,
    /// Formats served by a slower kernel path, if any.
    pub slow_formats: Vec<String>,
    /// Per-stream memory at the requested context.
    pub memory: StreamMemory,
}

/// Sizes a plan; `tensors` is the whole index (for total bytes), `context` in tokens.
pub fn summarize(plan: &ModelPlan, tensors: &[TensorEntry], context: u64) -> Summary {
    let claims = plan.claims();
    let mut classes: BTreeMap<TensorClass, ClassSummary> = BTreeMap::new();
    let mut slow = BTreeSet::new();
    let mut routed_per_layer: BTreeMap<usize, u64> = BTreeMap::new();
    for c in claims {
        let e = &c.entry;
        let s = classes.entry(c.class).or_insert_with(|| ClassSummary {
            class: c.class.label().into(),
            formats: Vec::new(),
            tensors: 0,
            params: 0,
            bytes: 0,
        });
        let f = e.format.to_string();
        if !s.formats.contains(&f) {
            s.formats.push(f.clone());
            s.formats.sort();
        }
        s.tensors += 1;
        s.params += e.elements();
        s.bytes += e.format.storage_bytes(e.elements());
        if matrix_kernel(e.format) == Some(KernelPath::Slow) {
            slow.insert(f);
        }
        if let (TensorClass::RoutedExperts, Some(l)) = (c.class, c.layer) {
            *routed_per_layer.entry(l).or_default() += e.elements();
        }
    }
    let params_total: u64 = classes.values().map(|c| c.params).sum();
    let inactive: u64 = routed_per_layer
        .iter()
        .map(|(l, routed)| {
            let (k, e) = routing(plan, *l);
            routed - (*routed as u128 * k as u128 / e.max(1) as u128) as u64
        })
        .sum();
    let embedding = claims.iter().find(|c| c.class == TensorClass::Embedding);
    let dim = |i: usize| {
        embedding
            .and_then(|c| c.entry.shape.get(i).copied())
            .unwrap_or(0)
    };
    Summary {
        family: plan.family().into(),
        model_type: plan.model_type().into(),
        layers: layer_counts(plan),
        vocab_size: dim(0),
        hidden_size: dim(1),
        moe_layers: moe_layers(plan),
        params_total,
        params_active: params_total - inactive,
        planned_bytes: classes.values().map(|c| c.bytes).sum(),
        classes: classes.into_values().collect(),
        weight_bytes: tensors
            .iter()
            .map(|t| t.format.storage_bytes(t.elements()))
            .sum(),
        ignored_tensors: plan.ignored().len(),
        head_tied: match plan {
            ModelPlan::Llama(p) => p.lm_head.is_none(),
            ModelPlan::NemotronH(p) => p.lm_head.is_none(),
            ModelPlan::MuseSpark(_) => false,
        },
        slow_formats: slow.into_iter().collect(),
        memory: memory(plan, context),
    }
}

/// Every MoE layer's experts, top-k and expert width.
fn moe_layers(plan: &ModelPlan) -> Vec<MoeLayer> {
    match plan {
        ModelPlan::NemotronH(p) => p
            .config
            .layers
            .iter()
            .enumerate()
            .filter_map(|(layer, b)| match b {
                NemotronBlock::Moe(m) => Some(MoeLayer {
                    layer,
                    experts: m.n_routed_experts,
                    top_k: m.num_experts_per_tok,
                    width: m.moe_intermediate_size,
                }),
                _ => None,
            })
            .collect(),
        ModelPlan::MuseSpark(p) => (0..p.layers.len())
            .map(|layer| MoeLayer {
                layer,
                experts: p.config.num_local_experts,
                top_k: p.config.num_experts_per_tok,
                width: p.config.moe_intermediate_size,
            })
            .collect(),
        ModelPlan::Llama(_) => Vec::new(),
    }
}

/// (top_k, experts) of a MoE layer.
fn routing(plan: &ModelPlan, layer: usize) -> (u64, u64) {
    match plan {
        ModelPlan::NemotronH(p) => match p.config.layers.get(layer) {
            Some(NemotronBlock::Moe(m)) => (m.num_experts_per_tok, m.n_routed_experts),
            _ => (1, 1),
        },
        ModelPlan::MuseSpark(p) => (p.config.num_experts_per_tok, p.config.num_local_experts),
        ModelPlan::Llama(_) => (1, 1),
    }
}

fn layer_counts(plan: &ModelPlan) -> Vec<LayerCount> {
    let kinds: Vec<&str> = match plan {
        ModelPlan::Llama(p) => p
            .config
            .layer_sliding
            .iter()
            .map(|s| {
                if *s {
                    "sliding-attention+mlp"
                } else {
                    "attention+mlp"
                }
            })
            .collect(),
        ModelPlan::NemotronH(p) => p.config.layers.iter().map(|b| b.type_name()).collect(),
        ModelPlan::MuseSpark(p) => p
            .config
            .layer_sliding
            .iter()
            .map(|s| {
                if *s {
                    "sliding-attention+moe"
                } else {
                    "full-attention+moe"
                }
            })
            .collect(),
    };
    let mut out: Vec<LayerCount> = Vec::new();
    for k in kinds {
        match out.iter_mut().find(|c| c.kind == k) {
            Some(c) => c.count += 1,
            None => out.push(LayerCount {
                kind: k.into(),
                count: 1,
            }),
        }
    }
    out
}

fn memory(plan: &ModelPlan, context: u64) -> StreamMemory {
    let b = STATE_ELEMENT_BYTES;
    let (mut per_token, mut kv, mut conv, mut ssm) = (0u64, 0u64, 0u64, 0u64);
    let mut attn = |kv_heads: u64, head_dim: u64, window: Option<u64>| {
        let t = 2 * kv_heads * head_dim * b;
        per_token += t;
        kv += t * window.map_or(context, |w| w.min(context));
    };
    match plan {
        ModelPlan::Llama(p) => {
            let c = &p.config;
            for s in &c.layer_sliding {
                let w = if *s { c.sliding_window } else { None };
                attn(c.num_key_value_heads, c.head_dim, w);
            }
        }
        ModelPlan::MuseSpark(p) => {
            let c = &p.config;
            for s in &c.layer_sliding {
                attn(
                    c.num_key_value_heads,
                    c.head_dim,
                    s.then_some(c.sliding_window),
                );
            }
        }
        ModelPlan::NemotronH(p) => {
            for block in &p.config.layers {
                match block {
                    NemotronBlock::Attention(a) => attn(a.num_kv_heads, a.head_dim, None),
                    NemotronBlock::Mamba(m) => {
                        conv += (m.conv_kernel - 1) * m.conv_dim() * b;
                        ssm += m.num_heads * m.head_dim * m.ssm_state_size * b;
                    }
                    _ => {}
                }
            }
        }
    }
    StreamMemory {
        context,
        element_bytes: b,
        kv_bytes_per_token: per_token,
        kv_bytes: kv,
        conv_state_bytes: conv,
        ssm_state_bytes: ssm,
        total_bytes: kv + conv + ssm,
    }
}

/// Formats a count with a metric suffix (134.5M, 12.3B).
fn count(n: u64) -> String {
    let f = n as f64;
    if n < 10_000 {
        n.to_string()
    } else if n < 1_000_000 {
        format!("{:.1}K", f / 1e3)
    } else if n < 1_000_000_000 {
        format!("{:.1}M", f / 1e6)
    } else {
        format!("{:.2}B", f / 1e9)
    }
}

/// Formats bytes in binary units.
fn bytes(n: u64) -> String {
    let f = n as f64;
    const K: f64 = 1024.0;
    if f < K {
        format!("{n} B")
    } else if f < K * K {
        format!("{:.1} KiB", f / K)
    } else if f < K * K * K {
        format!("{:.1} MiB", f / (K * K))
    } else {
        format!("{:.2} GiB", f / (K * K * K))
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let layers: Vec<String> = self
            .layers
            .iter()
            .map(|l| format!("{} {}", l.count, l.kind))
            .collect();
        let n: usize = self.layers.iter().map(|l| l.count).sum();
        writeln!(
            f,
            "family      {} (model_type {})",
            self.family, self.model_type
        )?;
        writeln!(f, "layers      {n}: {}", layers.join(", "))?;
        writeln!(
            f,
            "shape       hidden {}, vocabulary {}",
            self.hidden_size, self.vocab_size
        )?;
        if !self.moe_layers.is_empty() {
            let per: Vec<String> = self
                .moe_layers
                .iter()
                .map(|m| format!("L{} {}x{} top-{}", m.layer, m.experts, m.width, m.top_k))
                .collect();
            writeln!(f, "moe         {}", per.join(", "))?;
        }
        writeln!(
            f,
            "parameters  {} total, {} active per token",
            count(self.params_total),
            count(self.params_active)
        )?;
        writeln!(
            f,
            "weights     {} ({} bytes)",
            bytes(self.weight_bytes),
            self.weight_bytes
        )?;
        for c in &self.classes {
            writeln!(
                f,
                "  {:<19} {:<28} {:>9} params {:>11}",
                c.class,
                c.formats.join(", "),
                count(c.params),
                bytes(c.bytes)
            )?;
        }
        if self.head_tied {
            writeln!(f, "  {:<19} tied to the embedding", "head")?;
        }
        if !self.slow_formats.is_empty() {
            writeln!(f, "slow paths  {}", self.slow_formats.join(", "))?;
        }
        if self.ignored_tensors > 0 {
            writeln!(
                f,
                "unused      {} tensors present but not used",
                self.ignored_tensors
            )?;
        }
        let m = &self.memory;
        write!(
            f,
            "per stream  at context {}: {} (KV {} at {} B/token",
            m.context,
            bytes(m.total_bytes),
            bytes(m.kv_bytes),
            m.kv_bytes_per_token
        )?;
        if m.conv_state_bytes + m.ssm_state_bytes > 0 {
            write!(
                f,
                "; Mamba conv {} + SSM {}",
                bytes(m.conv_state_bytes),
                bytes(m.ssm_state_bytes)
            )?;
        }
        writeln!(f, "; f32 elements)")
    }
}
