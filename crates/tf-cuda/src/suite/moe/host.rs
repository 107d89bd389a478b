//! The MoE block on the host: its operands, the CPU's f32 pipeline (the CPU kernels, one row at
//! a time) and the f64 reference on the CPU's picks.

use crate::error::{CudaError, Result};
use crate::moe::Routing;
use crate::suite::packed::HostWeights;
use tf_kernels::matmul::matmul as cpu_matmul;
use tf_kernels::ops::{combine, exp, relu2, rms_norm, route, silu_mul, Pick, RouteScratch};
use tf_kernels::pool::Pool;

/// Muse Spark's extra operands: pre-expert projection and norm, post-expert norm and projection.
pub(super) struct MuseHost {
    pub(super) pre: HostWeights,
    pub(super) pre_gain: Vec<f32>,
    pub(super) post_gain: Vec<f32>,
    pub(super) post: HostWeights,
    pub(super) eps: f32,
}

/// One expert's host matrices.
pub(super) struct HostExpert {
    pub(super) gate: Option<HostWeights>,
    pub(super) up: HostWeights,
    pub(super) down: HostWeights,
}

/// A MoE block on the host: the operands both sides use.
pub(super) struct HostMoe {
    pub(super) routing: Routing,
    pub(super) dim: usize,
    pub(super) router: HostWeights,
    pub(super) bias: Vec<f32>,
    pub(super) experts: Vec<HostExpert>,
    pub(super) muse: Option<MuseHost>,
}

pub(super) fn packed_f64(w: &HostWeights) -> Vec<f64> {
    (0..w.rows).flat_map(|j| w.row_f64(j)).collect()
}

pub(super) fn mv64(w: &[f64], cols: usize, x: &[f64]) -> Vec<f64> {
    w.chunks_exact(cols)
        .map(|r| r.iter().zip(x).map(|(a, b)| a * b).sum())
        .collect()
}

pub(super) fn shape_err(op: &'static str) -> impl Fn(String) -> CudaError {
    move |detail| CudaError::Shape { op, detail }
}

/// Muse Spark's router on the host (tf_models muse_spark::moe::route): the CPU's arithmetic.
pub(super) fn muse_route(
    logits: &[f32],
    bias: &[f32],
    top_k: usize,
    mult: f32,
    scale: f32,
) -> Vec<Pick> {
    let score = |x: f32| {
        let y = 1.0 / (1.0 + exp(x.abs()));
        if x < 0.0 {
            y
        } else {
            1.0 - y
        }
    };
    let scores: Vec<f32> = logits.iter().map(|&l| score(l * mult)).collect();
    let mut biased: Vec<f32> = scores.iter().zip(bias).map(|(s, b)| s + b).collect();
    let mut picks = Vec::with_capacity(top_k);
    for _ in 0..top_k {
        let mut at: Option<usize> = None;
        for (e, &v) in biased.iter().enumerate() {
            if !v.is_nan() && at.is_none_or(|a| v > biased[a]) {
                at = Some(e);
            }
        }
        let Some(e) = at else { break };
        picks.push(Pick {
            expert: e as u32,
            weight: scores[e],
        });
        biased[e] = f32::NEG_INFINITY;
    }
    let mut total = 0.0f32;
    for p in &picks {
        total += p.weight;
    }
    for p in picks.iter_mut() {
        p.weight = p.weight / (total + 1e-15) * scale;
    }
    picks
}

impl HostMoe {
    /// The CPU's picks for one row.
    pub(super) fn picks(&self, x: &[f32], pool: &Pool) -> Result<Vec<Pick>> {
        let e = self.routing.n_experts();
        let mut logits = vec![0f32; e];
        cpu_matmul(&self.router.packed(), x, 1, &mut logits, pool)
            .map_err(|err| shape_err("cpu router")(err.to_string()))?;
        Ok(match self.routing {
            Routing::Grouped(p) => {
                let mut picks = vec![
                    Pick {
                        expert: 0,
                        weight: 0.0
                    };
                    p.top_k
                ];
                route(
                    &logits,
                    &self.bias,
                    &p,
                    &mut RouteScratch::default(),
                    &mut picks,
                )
                .map_err(|err| shape_err("cpu route")(err.to_string()))?;
                picks
            }
            Routing::Muse {
                top_k,
                multiplier,
                scale,
                ..
            } => muse_route(&logits, &self.bias, top_k, multiplier, scale),
        })
    }

    /// One row through the CPU's f32 pipeline (the CPU kernels; rows are independent).
    pub(super) fn cpu_row(&self, x: &[f32], pool: &Pool) -> Result<Vec<f32>> {
        let err = |e: tf_kernels::ops::OpError| shape_err("cpu moe")(e.to_string());
        let merr = |e: tf_kernels::matmul::MatmulError| shape_err("cpu moe")(e.to_string());
        let picks = self.picks(x, pool)?;
        let mm = |w: &HostWeights, v: &[f32]| -> Result<Vec<f32>> {
            let mut y = vec![0f32; w.rows];
            cpu_matmul(&w.packed(), v, 1, &mut y, pool).map_err(merr)?;
            Ok(y)
        };
        let xin = match &self.muse {
            Some(m) => {
                let c = mm(&m.pre, x)?;
                let mut n = vec![0f32; c.len()];
                rms_norm(&c, &m.pre_gain, m.eps, 1, &mut n).map_err(err)?;
                n
            }
            None => x.to_vec(),
        };
        let mut outs = Vec::new();
        for p in &picks {
            let ex = &self.experts[p.expert as usize];
            let up = mm(&ex.up, &xin)?;
            let mut act = vec![0f32; up.len()];
            match &ex.gate {
                Some(g) => silu_mul(&mm(g, &xin)?, &up, &mut act).map_err(err)?,
                None => relu2(&up, &mut act).map_err(err)?,
            }
            outs.extend(mm(&ex.down, &act)?);
        }
        let width = self.experts[0].down.rows;
        let mut acc = vec![0f32; width];
        match &self.muse {
            None => combine(&picks, &outs, &mut acc).map_err(err)?,
            Some(m) => {
                let ones = vec![1f32; width];
                let mut nv = vec![0f32; width];
                for (p, d) in picks.iter().zip(outs.chunks_exact(width)) {
                    let v: Vec<f32> = d.iter().zip(&m.post_gain).map(|(a, g)| a * g).collect();
                    rms_norm(&v, &ones, m.eps, 1, &mut nv).map_err(err)?;
                    for (a, &n) in acc.iter_mut().zip(&nv) {
                        *a += n * p.weight;
                    }
                }
            }
        }
        match &self.muse {
            Some(m) => mm(&m.post, &acc),
            None => Ok(acc),
        }
    }

    /// One row in f64 with the CPU's picks (the harness's reference).
    pub(super) fn reference(&self, x: &[f32], w64: &Weights64, pool: &Pool, out: &mut [f64]) {
        let Ok(picks) = self.picks(x, pool) else {
            out.fill(f64::NAN);
            return;
        };
        let x64: Vec<f64> = x.iter().map(|&v| v as f64).collect();
        let rms = |v: &[f64], eps: f32| -> Vec<f64> {
            let ms = v.iter().map(|a| a * a).sum::<f64>() / v.len() as f64;
            let r = 1.0 / (ms + eps as f64).sqrt();
            v.iter().map(|a| a * r).collect()
        };
        let xin = match (&self.muse, &w64.pre) {
            (Some(m), Some(pre)) => {
                let c = mv64(pre, self.dim, &x64);
                rms(&c, m.eps)
                    .iter()
                    .zip(&m.pre_gain)
                    .map(|(a, &g)| a * g as f64)
                    .collect()
            }
            _ => x64,
        };
        let width = self.experts[0].down.rows;
        let mut acc = vec![0f64; width];
        for p in &picks {
            let (ex, e64) = (
                &self.experts[p.expert as usize],
                &w64.experts[p.expert as usize],
            );
            let up = mv64(&e64.1, ex.up.cols, &xin);
            let act: Vec<f64> = match &e64.0 {
                Some(g) => mv64(g, ex.up.cols, &xin)
                    .iter()
                    .zip(&up)
                    .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
                    .collect(),
                None => up.iter().map(|u| u.max(0.0) * u.max(0.0)).collect(),
            };
            let d = mv64(&e64.2, ex.down.cols, &act);
            let d = match &self.muse {
                Some(m) => rms(
                    &d.iter()
                        .zip(&m.post_gain)
                        .map(|(a, &g)| a * g as f64)
                        .collect::<Vec<_>>(),
                    m.eps,
                ),
                None => d,
            };
            for (a, v) in acc.iter_mut().zip(&d) {
                *a += p.weight as f64 * v;
            }
        }
        match (&self.muse, &w64.post) {
            (Some(_), Some(post)) => out.copy_from_slice(&mv64(post, width, &acc)),
            _ => out.copy_from_slice(&acc),
        }
    }
}

/// Decoded f64 weights of the reference: per expert (gate, up, down), and Muse's projections.
pub(super) type Expert64 = (Option<Vec<f64>>, Vec<f64>, Vec<f64>);

/// f64 weights of a [`HostMoe`].
pub(super) struct Weights64 {
    pub(super) experts: Vec<Expert64>,
    pub(super) pre: Option<Vec<f64>>,
    pub(super) post: Option<Vec<f64>>,
}
