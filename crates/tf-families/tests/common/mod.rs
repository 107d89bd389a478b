//! Builders of crafted configs and matching tensor indexes, written from the model definitions
//! (not from the crate's planner), so a valid build passes and one mutation is refused.
#![allow(dead_code)]

use serde_json::{json, Value};
use tf_formats::{DType, TensorEntry, WeightFormat};

/// One tensor entry.
pub fn e(name: &str, format: WeightFormat, shape: &[u64]) -> TensorEntry {
    TensorEntry {
        name: name.into(),
        format,
        shape: shape.to_vec(),
    }
}

pub const BF16: WeightFormat = WeightFormat::Dense(DType::BF16);
pub const F32: WeightFormat = WeightFormat::Dense(DType::F32);

/// MLX affine with bf16 scales.
pub fn mlx(bits: u8, group_size: u32) -> WeightFormat {
    WeightFormat::MlxAffine {
        bits,
        group_size,
        scales: DType::BF16,
    }
}

/// Replaces the entry of this name (panics in the test if absent, which is a test bug).
pub fn set(entries: &mut [TensorEntry], name: &str, f: impl FnOnce(&mut TensorEntry)) {
    let t = entries
        .iter_mut()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no {name}"));
    f(t);
}

/// Removes the entry of this name, asserting it existed.
pub fn remove(entries: &mut Vec<TensorEntry>, name: &str) {
    let before = entries.len();
    entries.retain(|t| t.name != name);
    assert_eq!(entries.len() + 1, before, "{name} was not in the index");
}

/// A small llama-family config.
pub fn llama_config(model_type: &str, layers: u64, tie: bool) -> Value {
    json!({
        "model_type": model_type,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-5,
        "rope_theta": 100000.0,
        "vocab_size": 256,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": tie,
        "bos_token_id": 1,
        "eos_token_id": [2, 3],
    })
}

/// The tensors a llama-family config implies: every matrix in `mat`, norms and biases F32.
pub fn llama_entries(cfg: &Value, mat: WeightFormat) -> Vec<TensorEntry> {
    let g = |k: &str| cfg[k].as_u64().unwrap();
    let (h, i, v, heads, kv) = (
        g("hidden_size"),
        g("intermediate_size"),
        g("vocab_size"),
        g("num_attention_heads"),
        g("num_key_value_heads"),
    );
    let hd = cfg["head_dim"].as_u64().unwrap_or(h / heads);
    let mt = cfg["model_type"].as_str().unwrap();
    let qkv_bias = mt == "qwen2" || cfg["attention_bias"].as_bool().unwrap_or(false);
    let mut out = vec![e("model.embed_tokens.weight", mat, &[v, h])];
    for l in 0..g("num_hidden_layers") {
        let p = format!("model.layers.{l}.");
        let n = |s: &str| format!("{p}{s}");
        out.push(e(&n("input_layernorm.weight"), F32, &[h]));
        out.push(e(&n("self_attn.q_proj.weight"), mat, &[heads * hd, h]));
        out.push(e(&n("self_attn.k_proj.weight"), mat, &[kv * hd, h]));
        out.push(e(&n("self_attn.v_proj.weight"), mat, &[kv * hd, h]));
        out.push(e(&n("self_attn.o_proj.weight"), mat, &[h, heads * hd]));
        if qkv_bias {
            out.push(e(&n("self_attn.q_proj.bias"), F32, &[heads * hd]));
            out.push(e(&n("self_attn.k_proj.bias"), F32, &[kv * hd]));
            out.push(e(&n("self_attn.v_proj.bias"), F32, &[kv * hd]));
        }
        if mt == "qwen3" {
            out.push(e(&n("self_attn.q_norm.weight"), F32, &[hd]));
            out.push(e(&n("self_attn.k_norm.weight"), F32, &[hd]));
        }
        out.push(e(&n("post_attention_layernorm.weight"), F32, &[h]));
        out.push(e(&n("mlp.gate_proj.weight"), mat, &[i, h]));
        out.push(e(&n("mlp.up_proj.weight"), mat, &[i, h]));
        out.push(e(&n("mlp.down_proj.weight"), mat, &[h, i]));
    }
    out.push(e("model.norm.weight", F32, &[h]));
    if !cfg["tie_word_embeddings"].as_bool().unwrap_or(false) {
        out.push(e("lm_head.weight", mat, &[v, h]));
    }
    out
}

/// A Nemotron-H layer kind for the builder; MoE values of `None` inherit the global fields.
#[derive(Clone, Debug)]
pub enum Blk {
    Mamba,
    Attn,
    Mlp,
    Moe {
        experts: Option<u64>,
        top_k: Option<u64>,
        inter: Option<u64>,
    },
}

/// A Nemotron-H / Puzzle model description that yields both config.json and the tensor index.
#[derive(Clone, Debug)]
pub struct Nemo {
    pub hidden: u64,
    pub vocab: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
    pub mamba_heads: u64,
    pub mamba_head_dim: u64,
    pub state: u64,
    pub groups: u64,
    pub conv_kernel: u64,
    pub mlp_inter: u64,
    pub experts: u64,
    pub top_k: u64,
    pub moe_inter: u64,
    pub shared_inter: Option<u64>,
    pub latent: Option<u64>,
    pub blocks: Vec<Blk>,
    pub puzzle: bool,
    /// MLX on-disk form (stacked experts, conv `[C, K, 1]`) instead of HF.
    pub mlx_form: bool,
    pub mat: WeightFormat,
    pub latent_fmt: WeightFormat,
    pub head_fmt: WeightFormat,
}

impl Nemo {
    /// A tiny hybrid: M, E, *, -, E (HF form, bf16).
    pub fn tiny() -> Nemo {
        Nemo {
            hidden: 64,
            vocab: 128,
            heads: 4,
            kv_heads: 2,
            head_dim: 16,
            mamba_heads: 8,
            mamba_head_dim: 8,
            state: 16,
            groups: 2,
            conv_kernel: 4,
            mlp_inter: 96,
            experts: 8,
            top_k: 2,
            moe_inter: 32,
            shared_inter: Some(64),
            latent: None,
            blocks: vec![
                Blk::Mamba,
                Blk::Moe {
                    experts: None,
                    top_k: None,
                    inter: None,
                },
                Blk::Attn,
                Blk::Mlp,
                Blk::Moe {
                    experts: None,
                    top_k: None,
                    inter: None,
                },
            ],
            puzzle: false,
            mlx_form: false,
            mat: BF16,
            latent_fmt: BF16,
            head_fmt: BF16,
        }
    }

    fn moe_values(&self, b: &Blk) -> (u64, u64, u64) {
        match b {
            Blk::Moe {
                experts,
                top_k,
                inter,
            } => (
                experts.unwrap_or(self.experts),
                top_k.unwrap_or(self.top_k),
                inter.unwrap_or(self.moe_inter),
            ),
            _ => (0, 0, 0),
        }
    }

    /// config.json for this model.
    pub fn config(&self) -> Value {
        let mut c = json!({
            "model_type": if self.puzzle { "nemotron_h_puzzle" } else { "nemotron_h" },
            "vocab_size": self.vocab,
            "hidden_size": self.hidden,
            "num_hidden_layers": self.blocks.len(),
            "num_attention_heads": self.heads,
            "num_key_value_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "attention_bias": false,
            "mamba_num_heads": self.mamba_heads,
            "mamba_head_dim": self.mamba_head_dim,
            "mamba_proj_bias": false,
            "ssm_state_size": self.state,
            "conv_kernel": self.conv_kernel,
            "n_groups": self.groups,
            "use_conv_bias": true,
            "mlp_bias": false,
            "layer_norm_epsilon": 1e-5,
            "intermediate_size": self.mlp_inter,
            "n_routed_experts": self.experts,
            "num_experts_per_tok": self.top_k,
            "moe_intermediate_size": self.moe_inter,
            "n_shared_experts": if self.shared_inter.is_some() { 1 } else { 0 },
            "moe_shared_expert_intermediate_size": self.shared_inter.unwrap_or(0),
            "n_group": 1,
            "topk_group": 1,
            "routed_scaling_factor": 2.5,
            "norm_topk_prob": true,
            "time_step_limit": [0.0, 1.0e9],
            "tie_word_embeddings": false,
            "max_position_embeddings": 8192,
            "bos_token_id": 1,
            "eos_token_id": 2,
        });
        if let Some(l) = self.latent {
            c["moe_latent_size"] = json!(l);
        }
        if self.puzzle {
            let list: Vec<Value> = self
                .blocks
                .iter()
                .map(|b| match b {
                    Blk::Mamba => json!({"block_type": "mamba"}),
                    Blk::Attn => json!({"block_type": "attention"}),
                    Blk::Mlp => json!({"block_type": "mlp"}),
                    Blk::Moe {
                        experts,
                        top_k,
                        inter,
                    } => {
                        let mut o = json!({"block_type": "moe"});
                        if let Some(x) = experts {
                            o["n_routed_experts"] = json!(x);
                        }
                        if let Some(x) = top_k {
                            o["num_experts_per_tok"] = json!(x);
                        }
                        if let Some(x) = inter {
                            o["moe_intermediate_size"] = json!(x);
                        }
                        o
                    }
                })
                .collect();
            c["block_configs"] = Value::Array(list);
        } else {
            let pattern: String = self
                .blocks
                .iter()
                .map(|b| match b {
                    Blk::Mamba => 'M',
                    Blk::Attn => '*',
                    Blk::Mlp => '-',
                    Blk::Moe { .. } => 'E',
                })
                .collect();
            c["hybrid_override_pattern"] = json!(pattern);
        }
        c
    }

    /// The tensor index this model's checkpoint holds.
    pub fn entries(&self) -> Vec<TensorEntry> {
        let h = self.hidden;
        let mat = self.mat;
        let mut out = vec![e("backbone.embeddings.weight", mat, &[self.vocab, h])];
        for (l, b) in self.blocks.iter().enumerate() {
            let p = format!("backbone.layers.{l}.");
            out.push(e(&format!("{p}norm.weight"), F32, &[h]));
            let m = |s: &str| format!("{p}mixer.{s}");
            match b {
                Blk::Mamba => {
                    let inter = self.mamba_heads * self.mamba_head_dim;
                    let conv = inter + 2 * self.groups * self.state;
                    let nh = self.mamba_heads;
                    out.push(e(&m("in_proj.weight"), mat, &[inter + conv + nh, h]));
                    let k = self.conv_kernel;
                    let shape = if self.mlx_form {
                        [conv, k, 1]
                    } else {
                        [conv, 1, k]
                    };
                    out.push(e(&m("conv1d.weight"), BF16, &shape));
                    out.push(e(&m("conv1d.bias"), BF16, &[conv]));
                    out.push(e(&m("dt_bias"), BF16, &[nh]));
                    out.push(e(&m("A_log"), F32, &[nh]));
                    out.push(e(&m("D"), BF16, &[nh]));
                    out.push(e(&m("norm.weight"), BF16, &[inter]));
                    out.push(e(&m("out_proj.weight"), mat, &[h, inter]));
                }
                Blk::Attn => {
                    let (q, kv) = (self.heads * self.head_dim, self.kv_heads * self.head_dim);
                    out.push(e(&m("q_proj.weight"), mat, &[q, h]));
                    out.push(e(&m("k_proj.weight"), mat, &[kv, h]));
                    out.push(e(&m("v_proj.weight"), mat, &[kv, h]));
                    out.push(e(&m("o_proj.weight"), mat, &[h, q]));
                }
                Blk::Mlp => {
                    out.push(e(&m("up_proj.weight"), mat, &[self.mlp_inter, h]));
                    out.push(e(&m("down_proj.weight"), mat, &[h, self.mlp_inter]));
                }
                Blk::Moe { .. } => {
                    let (ex, _, inter) = self.moe_values(b);
                    let d = self.latent.unwrap_or(h);
                    out.push(e(&m("gate.weight"), F32, &[ex, h]));
                    out.push(e(&m("gate.e_score_correction_bias"), F32, &[ex]));
                    if self.mlx_form {
                        out.push(e(&m("switch_mlp.fc1.weight"), mat, &[ex, inter, d]));
                        out.push(e(&m("switch_mlp.fc2.weight"), mat, &[ex, d, inter]));
                    } else {
                        for x in 0..ex {
                            out.push(e(
                                &m(&format!("experts.{x}.up_proj.weight")),
                                mat,
                                &[inter, d],
                            ));
                            out.push(e(
                                &m(&format!("experts.{x}.down_proj.weight")),
                                mat,
                                &[d, inter],
                            ));
                        }
                    }
                    if let Some(si) = self.shared_inter {
                        out.push(e(&m("shared_experts.up_proj.weight"), mat, &[si, h]));
                        out.push(e(&m("shared_experts.down_proj.weight"), mat, &[h, si]));
                    }
                    if let Some(lat) = self.latent {
                        out.push(e(&m("fc1_latent_proj.weight"), self.latent_fmt, &[lat, h]));
                        out.push(e(&m("fc2_latent_proj.weight"), self.latent_fmt, &[h, lat]));
                    }
                }
            }
        }
        out.push(e("backbone.norm_f.weight", F32, &[h]));
        out.push(e("lm_head.weight", self.head_fmt, &[self.vocab, h]));
        out
    }
}

/// A small Muse Spark text config (4 layers: 3 sliding with RoPE, the last full NoPE).
pub fn muse_config() -> Value {
    json!({
        "model_type": "muse_spark",
        "text_config": {
            "hidden_size": 64,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "num_hidden_layers": 4,
            "vocab_size": 128,
            "rms_norm_eps": 1e-5,
            "post_norm_eps": 1e-8,
            "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0},
            "layer_rope_theta": [500000.0, 500000.0, 500000.0, 0],
            "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
            "sliding_window": 32,
            "final_logit_softcapping": 20.0,
            "output_multiplier": 0.1767766952966369,
            "num_local_experts": 8,
            "num_experts_per_tok": 2,
            "moe_hidden_size": 32,
            "moe_intermediate_size": 64,
            "bos_token_id": 200000,
            "eos_token_id": 200001,
        },
    })
}

/// The tensors of [`muse_config`] in HF (`mlx_form = false`) or MLX form.
pub fn muse_entries(mlx_form: bool, mat: WeightFormat) -> Vec<TensorEntry> {
    let (h, v, q, kv, ex, c, i) = (64u64, 128u64, 64u64, 32u64, 8u64, 32u64, 64u64);
    let lm = "model.language_model.";
    let mut out = vec![e(&format!("{lm}embed_tokens.weight"), mat, &[v, h])];
    for l in 0..4 {
        let n = |s: &str| format!("{lm}layers.{l}.{s}");
        out.push(e(&n("input_layernorm.weight"), BF16, &[h]));
        if mlx_form {
            out.push(e(&n("self_attn.qkvg_proj.weight"), mat, &[2 * (q + kv), h]));
            for g in [
                "add_attn_alpha",
                "add_attn_beta",
                "add_ffn_alpha",
                "add_ffn_beta",
            ] {
                out.push(e(&n(g), F32, &[h]));
            }
            out.push(e(&n("mlp.experts.gate_proj.weight"), mat, &[ex, i, c]));
            out.push(e(&n("mlp.experts.up_proj.weight"), mat, &[ex, i, c]));
        } else {
            out.push(e(&n("self_attn.q_proj.weight"), mat, &[q, h]));
            out.push(e(&n("self_attn.k_proj.weight"), mat, &[kv, h]));
            out.push(e(&n("self_attn.v_proj.weight"), mat, &[kv, h]));
            out.push(e(&n("self_attn.gate_proj.weight"), mat, &[q, h]));
            out.push(e(&n("post_attention_residual_gate.gate"), F32, &[h]));
            out.push(e(&n("post_feedforward_residual_gate.gate"), F32, &[h]));
            out.push(e(&n("mlp.experts.gate_up_proj"), mat, &[ex, 2 * i, c]));
        }
        out.push(e(&n("mlp.experts.down_proj"), mat, &[ex, c, i]));
        if mlx_form {
            let last = out.pop().unwrap();
            out.push(e(
                &format!("{}.weight", last.name),
                last.format,
                &last.shape,
            ));
        }
        out.push(e(&n("self_attn.o_proj.weight"), mat, &[h, q]));
        out.push(e(&n("pre_feedforward_layernorm.weight"), BF16, &[h]));
        out.push(e(&n("post_feedforward_layernorm.weight"), BF16, &[h]));
        out.push(e(&n("mlp.gate.weight"), F32, &[ex, h]));
        out.push(e(&n("mlp.gate.e_score_correction_bias"), F32, &[ex]));
        out.push(e(&n("mlp.pre_expert_proj.weight"), mat, &[c, h]));
        out.push(e(&n("mlp.pre_expert_norm.weight"), BF16, &[c]));
        out.push(e(&n("mlp.experts.post_expert_norm.weight"), BF16, &[c]));
        out.push(e(&n("mlp.post_expert_proj.weight"), mat, &[h, c]));
    }
    out.push(e(&format!("{lm}norm.weight"), BF16, &[h]));
    out.push(e("lm_head.weight", mat, &[v, h]));
    out
}
