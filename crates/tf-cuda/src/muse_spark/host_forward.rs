//! The GPU's launch sequence (launch.rs) replayed on the host with the CPU kernels, over the
//! loader's host operands (the exact weights the GPU gets: HF q/k rows permuted, `[q|k|v|gate]`
//! concatenated, gains, residual coefficients, stacked expert views, plain final gain), held
//! against the CPU model (tf_models) bit for bit on every fixture. With the contract suite (each
//! GPU kernel == its CPU kernel) this checks the GPU forward's plan without a GPU.

use super::weights::{final_norm, host_layer, plain_matrix, HostAttn, HostLayer};
use std::path::PathBuf;
use tf_families::muse_spark::MuseSparkConfig;
use tf_families::ModelPlan;
use tf_formats::checkpoint::Checkpoint;
use tf_kernels::matmul::{embedding_row, matmul, PackedMatrix};
use tf_kernels::ops::{
    attend, exp, rms_norm, silu_mul, softcap_inplace, AttnParams, AttnScratch, KvCache, Rope,
    RopeAngles, RopeConfig, RopePairing, RopeScaling,
};
use tf_kernels::pool::Pool;
use tf_models::{LoadOptions, Row};

fn mm(m: &PackedMatrix, x: &[f32], pool: &Pool) -> Vec<f32> {
    let mut y = vec![0f32; m.rows()];
    matmul(m, x, 1, &mut y, pool).unwrap();
    y
}

fn norm(x: &[f32], gain: &[f32], eps: f32) -> Vec<f32> {
    let mut y = vec![0f32; x.len()];
    rms_norm(x, gain, eps, x.len() / gain.len(), &mut y).unwrap();
    y
}

/// `h = alpha * h + beta * v` (tf_muse_gated_add).
fn gated_add(h: &mut [f32], v: &[f32], (alpha, beta): &(Vec<f32>, Vec<f32>)) {
    for (i, s) in h.iter_mut().enumerate() {
        *s = alpha[i] * *s + beta[i] * v[i];
    }
}

/// tf_moe_route_muse on the host: (expert, weight) picks.
fn route(logits: &[f32], bias: &[f32], k: usize, mult: f32, scale: f32) -> Vec<(usize, f32)> {
    let score = |x: f32| {
        let y = 1.0 / (1.0 + exp(x.abs()));
        if x < 0.0 {
            y
        } else {
            1.0 - y
        }
    };
    let s: Vec<f32> = logits.iter().map(|&l| score(l * mult)).collect();
    let mut b: Vec<f32> = s.iter().zip(bias).map(|(s, b)| s + b).collect();
    let mut picks = Vec::new();
    for _ in 0..k {
        let mut at: Option<usize> = None;
        for (e, &v) in b.iter().enumerate() {
            if !v.is_nan() && at.is_none_or(|a| v > b[a]) {
                at = Some(e);
            }
        }
        let Some(e) = at else { break };
        picks.push((e, s[e]));
        b[e] = f32::NEG_INFINITY;
    }
    let mut total = 0.0f32;
    for p in &picks {
        total += p.1;
    }
    picks
        .into_iter()
        .map(|(e, w)| (e, w / (total + 1e-15) * scale))
        .collect()
}

struct HostModel<'a> {
    cfg: MuseSparkConfig,
    layers: Vec<HostLayer<'a>>,
    embed: PackedMatrix<'a>,
    head: PackedMatrix<'a>,
    final_gain: Vec<f32>,
    rope: Rope,
    /// Planted control: the HF q/k rows left in their stored order.
    plant_unpermuted: bool,
}

impl HostModel<'_> {
    /// One token of one stream, as launch.rs orders the work.
    fn token(&self, kv: &mut KvCache, pos: usize, token: u32, pool: &Pool) -> Vec<f32> {
        let c = &self.cfg;
        let (h, hd) = (c.hidden_size as usize, c.head_dim as usize);
        let (nh, nkv) = (
            c.num_attention_heads as usize,
            c.num_key_value_heads as usize,
        );
        let (qw, kw) = (nh * hd, nkv * hd);
        let (eps, post_eps) = (c.rms_norm_eps as f32, c.post_norm_eps as f32);
        let (ones_h, ones_hd) = (vec![1f32; h], vec![1f32; hd]);
        let ones_c = vec![1f32; c.moe_hidden_size as usize];
        let mut a = vec![0f32; h];
        embedding_row(&self.embed, token as usize, &mut a).unwrap();
        let mut x = norm(&a, &ones_h, eps);
        let mut an = RopeAngles::default();
        self.rope.angles_into(pos, &mut an);
        for (li, l) in self.layers.iter().enumerate() {
            let a = norm(&x, &l.input_gain, eps);
            let parts = match (&l.attn, self.plant_unpermuted) {
                (HostAttn::Separate { q, k, v, gate, .. }, true) => vec![*q, *k, *v, *gate],
                _ => l.attn.parts().unwrap(),
            };
            let qkvg: Vec<f32> = parts.iter().flat_map(|m| mm(m, &a, pool)).collect();
            let mut q = norm(&qkvg[..qw], &ones_hd, eps);
            q.iter_mut().for_each(|e| *e *= c.qk_scale_factor as f32);
            let mut k = norm(&qkvg[qw..qw + kw], &ones_hd, eps);
            if l.rope {
                self.rope.apply_angles(&mut q, nh, &an).unwrap();
                self.rope.apply_angles(&mut k, nkv, &an).unwrap();
            }
            let v = &qkvg[qw + kw..qw + 2 * kw];
            kv.layer_mut(li).unwrap().append(&k, v).unwrap();
            let params = AttnParams {
                n_heads: nh,
                n_kv_heads: nkv,
                head_dim: hd,
                scale: 1.0 / (hd as f32).sqrt(),
                window: l.sliding.then_some(c.sliding_window as usize),
                softcap: None,
            };
            let mut out = vec![0f32; qw];
            let cache = kv.layer(li).unwrap();
            attend(
                &q,
                cache,
                pos,
                &params,
                &mut out,
                &mut AttnScratch::default(),
            )
            .unwrap();
            let mut o = norm(&out, &ones_hd, eps);
            for (e, &g) in o.iter_mut().zip(&qkvg[qw + 2 * kw..]) {
                *e *= 1.0 / (1.0 + exp(-g));
            }
            let r = mm(&l.o_proj, &o, pool);
            gated_add(&mut x, &norm(&r, &ones_h, post_eps), &l.attn_gate);

            let a = norm(&x, &l.pre_ffn_gain, eps);
            let picks = route(
                &mm(&l.router, &a, pool),
                &l.router_bias,
                c.num_experts_per_tok as usize,
                c.output_multiplier as f32,
                c.routed_scaling_factor as f32,
            );
            let normed = norm(&mm(&l.pre_expert_proj, &a, pool), &l.pre_expert_gain, eps);
            let mut comb = vec![0f32; normed.len()];
            for (e, w) in picks {
                let [gate, up, down] = &l.experts;
                let (gv, uv) = (mm(&gate[e], &normed, pool), mm(&up[e], &normed, pool));
                let mut act = vec![0f32; gv.len()];
                silu_mul(&gv, &uv, &mut act).unwrap();
                let d = mm(&down[e], &act, pool);
                let v: Vec<f32> = d
                    .iter()
                    .zip(&l.post_expert_gain)
                    .map(|(a, g)| a * g)
                    .collect();
                for (s, n) in comb.iter_mut().zip(norm(&v, &ones_c, post_eps)) {
                    *s += n * w;
                }
            }
            let mut r = mm(&l.post_expert_proj, &comb, pool);
            r.iter_mut()
                .zip(&l.post_ffn_gain)
                .for_each(|(e, g)| *e *= g);
            gated_add(&mut x, &norm(&r, &ones_h, post_eps), &l.ffn_gate);
        }
        let mut logits = mm(&self.head, &norm(&x, &self.final_gain, eps), pool);
        logits
            .iter_mut()
            .for_each(|e| *e *= c.output_multiplier as f32);
        softcap_inplace(&mut logits, c.final_logit_softcapping as f32).unwrap();
        logits
    }
}

const TOKENS: [u32; 14] = [1, 17, 42, 99, 7, 200, 3, 55, 128, 64, 12, 250, 9, 31];

/// Positions where the host replay's logits equal the CPU model's bits, of `TOKENS.len()`.
fn identical_positions(fixture: &str, plant_unpermuted: bool) -> usize {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/muse_spark")
        .join(fixture);
    let ck = Checkpoint::open(&dir).unwrap();
    let ModelPlan::MuseSpark(plan) = tf_families::plan(ck.config(), ck.entries()).unwrap() else {
        panic!("not a Muse Spark fixture");
    };
    let cfg = plan.config.clone();
    let hd = cfg.head_dim as usize;
    let m = HostModel {
        layers: plan
            .layers
            .iter()
            .map(|l| host_layer(&ck, &cfg, plan.form, l).unwrap())
            .collect(),
        embed: plain_matrix(&ck, &plan.embed_tokens).unwrap(),
        head: plain_matrix(&ck, &plan.lm_head).unwrap(),
        final_gain: final_norm(&ck, &plan.norm).unwrap(),
        rope: Rope::new(RopeConfig {
            head_dim: hd,
            rotary_dim: hd,
            theta: cfg.rope_theta,
            pairing: RopePairing::Interleaved,
            scaling: RopeScaling::None,
        })
        .unwrap(),
        plant_unpermuted,
        cfg,
    };
    let pool = Pool::new(1);
    let mut kv = KvCache::new(m.layers.len(), m.cfg.num_key_value_heads as usize, hd).unwrap();
    let mut cpu = tf_models::load(&dir, &LoadOptions { threads: 1 }).unwrap();
    let mut state = cpu.new_state();
    let mut want = Vec::new();
    let mut same = 0;
    for (pos, &t) in TOKENS.iter().enumerate() {
        let row = Row {
            stream: 0,
            pos,
            token: t,
            logits: true,
        };
        cpu.forward(&[row], &mut [&mut state], &mut want).unwrap();
        let got = m.token(&mut kv, pos, t, &pool);
        same += (got.len() == want.len()
            && got
                .iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits())) as usize;
    }
    same
}

#[test]
fn host_replay_of_the_gpu_plan_equals_the_cpu_model_on_hf_f32() {
    assert_eq!(identical_positions("hf-f32", false), TOKENS.len());
}

#[test]
fn host_replay_of_the_gpu_plan_equals_the_cpu_model_on_mlx_f32() {
    assert_eq!(identical_positions("mlx-f32", false), TOKENS.len());
}

#[test]
fn host_replay_of_the_gpu_plan_equals_the_cpu_model_on_mlx_4bit() {
    assert_eq!(identical_positions("mlx-4bit", false), TOKENS.len());
}

#[test]
fn planted_unpermuted_hf_qk_rows_are_caught() {
    assert!(identical_positions("hf-f32", true) < TOKENS.len());
}
