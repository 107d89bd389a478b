//! The launch sequence of a Muse Spark round (reads only device buffers: capturable), and the
//! wrappers of the row kernels it needs beyond ops.rs (kernels/moe.cu).

use super::GpuMuseSpark;
use crate::device::Gpu;
use crate::error::Result;
use crate::moe::{self, ExpertNorm};
use crate::ops::{self, grid, i32_of, need, AttnShape, Pairing};
use cudarc::driver::{CudaSlice, LaunchConfig};

/// `dst[i, :] = src[i, offset..offset + width]` for `n` rows of `src_stride`.
fn take_cols(
    gpu: &Gpu,
    src: &CudaSlice<f32>,
    src_stride: usize,
    offset: usize,
    width: usize,
    n: usize,
    dst: &mut CudaSlice<f32>,
) -> Result<()> {
    const OP: &str = "take_cols";
    need(OP, "src", src.len(), n * src_stride)?;
    need(OP, "dst", dst.len(), n * width)?;
    if offset + width > src_stride {
        return Err(crate::error::CudaError::Shape {
            op: OP,
            detail: format!("columns {offset}..{} of {src_stride}", offset + width),
        });
    }
    if n == 0 || width == 0 {
        return Ok(());
    }
    let (s, o, w) = (
        i32_of(OP, "stride", src_stride)?,
        offset as i32,
        width as i32,
    );
    let mut b = gpu.launcher("tf_moe_take_cols")?;
    b.arg(src).arg(dst).arg(&s).arg(&o).arg(&w);
    let cfg = LaunchConfig {
        grid_dim: (n as u32, 1, 1),
        block_dim: (128, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: (f32*, f32*, i32, i32, i32); lengths and the column range checked above.
    unsafe { b.go(cfg, "launching take_cols") }
}

/// An element-wise kernel `(x: inout, [ro: in], scalars..., len)` over `len` elements.
fn elementwise(
    gpu: &Gpu,
    kernel: &'static str,
    x: &mut CudaSlice<f32>,
    ro: &[&CudaSlice<f32>],
    scalars: &[f32],
    width: Option<usize>,
    len: usize,
) -> Result<()> {
    need(kernel, "x", x.len(), len)?;
    let len_ = i32_of(kernel, "len", len)?;
    if len == 0 {
        return Ok(());
    }
    let w_ = match width {
        Some(w) => Some(i32_of(kernel, "width", w)?),
        None => None,
    };
    let mut b = gpu.launcher(kernel)?;
    b.arg(x);
    for r in ro {
        b.arg(*r);
    }
    for s in scalars {
        b.arg(s);
    }
    if let Some(w) = &w_ {
        b.arg(w);
    }
    b.arg(&len_);
    // SAFETY: each kernel takes (inout, read-only buffers..., scalars..., [width], len) in this
    // order (kernels/moe.cu); callers check the read-only buffers' lengths.
    unsafe { b.go(grid(len, 256), "launching a muse row kernel") }
}

impl GpuMuseSpark {
    /// The round's launches for `n` rows.
    pub(super) fn launch_all(&mut self, n: usize) -> Result<()> {
        let g = &self.gpu;
        let ws = &mut self.ws;
        let d = self.dims;
        let (nh, nkv, hd) = (self.shape.heads, self.shape.kv_heads, self.shape.head_dim);
        let (qw, kw, h) = (nh * hd, nkv * hd, d.hidden);
        ops::embed(g, &self.embed, &ws.tokens, n, &mut ws.a)?;
        ops::rms_norm(g, &ws.a, &ws.ones_hidden, d.eps, n, &mut ws.x)?;
        for (li, l) in self.layers.iter().enumerate() {
            // Attention.
            ops::rms_norm(g, &ws.x, &l.input_gain, d.eps, n, &mut ws.a)?;
            ops::matmul(g, &l.qkvg, &ws.a, n, &mut ws.qkvg)?;
            let width = 2 * (qw + kw);
            take_cols(g, &ws.qkvg, width, 0, qw, n, &mut ws.q_raw)?;
            take_cols(g, &ws.qkvg, width, qw, kw, n, &mut ws.k_raw)?;
            take_cols(g, &ws.qkvg, width, qw + kw, kw, n, &mut ws.v)?;
            take_cols(g, &ws.qkvg, width, qw + 2 * kw, qw, n, &mut ws.g)?;
            ops::rms_norm(g, &ws.q_raw, &ws.ones_head, d.eps, n * nh, &mut ws.q)?;
            elementwise(
                g,
                "tf_moe_scale",
                &mut ws.q,
                &[],
                &[d.qk_scale],
                None,
                n * qw,
            )?;
            ops::rms_norm(g, &ws.k_raw, &ws.ones_head, d.eps, n * nkv, &mut ws.k)?;
            if l.rope {
                let p = Pairing::Interleaved;
                ops::rope(g, &mut ws.q, &ws.cs, n, nh, hd, hd, p)?;
                ops::rope(g, &mut ws.k, &ws.cs, n, nkv, hd, hd, p)?;
            }
            ops::kv_append(g, &ws.k, &ws.v, &mut self.kv, &self.rows, li)?;
            let shape = AttnShape {
                window: l.sliding.then_some(d.window),
                ..self.shape
            };
            ops::attend(g, &ws.q, &self.kv, &self.rows, li, &shape, &mut ws.attn)?;
            ops::rms_norm(g, &ws.attn, &ws.ones_head, d.eps, n * nh, &mut ws.o)?;
            need("muse gate", "g", ws.g.len(), n * qw)?;
            elementwise(
                g,
                "tf_muse_sigmoid_mul",
                &mut ws.o,
                &[&ws.g],
                &[],
                None,
                n * qw,
            )?;
            ops::matmul(g, &l.o_proj, &ws.o, n, &mut ws.r)?;
            ops::rms_norm(g, &ws.r, &ws.ones_hidden, d.post_eps, n, &mut ws.rn)?;
            need("muse gated add", "branch", ws.rn.len(), n * h)?;
            let (al, be) = &l.attn_gate;
            need("muse gated add", "alpha", al.len().min(be.len()), h)?;
            elementwise(
                g,
                "tf_muse_gated_add",
                &mut ws.x,
                &[&ws.rn, al, be],
                &[],
                Some(h),
                n * h,
            )?;

            // Mixture of experts.
            ops::rms_norm(g, &ws.x, &l.pre_ffn_gain, d.eps, n, &mut ws.a)?;
            ops::matmul(g, &l.router, &ws.a, n, &mut ws.router)?;
            moe::route(g, &self.routing, &ws.router, &l.router_bias, n, &mut ws.moe)?;
            ops::matmul(g, &l.pre_expert_proj, &ws.a, n, &mut ws.comp)?;
            ops::rms_norm(g, &ws.comp, &l.pre_expert_gain, d.eps, n, &mut ws.normed)?;
            moe::experts(g, &l.experts, &ws.normed, None, &mut ws.moe)?;
            let norm = ExpertNorm {
                gain: &l.post_expert_gain,
                eps: d.post_eps,
            };
            moe::combine(g, &ws.moe, d.expert, Some(norm), &mut ws.comb)?;
            ops::matmul(g, &l.post_expert_proj, &ws.comb, n, &mut ws.r)?;
            need("muse post-ffn gain", "gain", l.post_ffn_gain.len(), h)?;
            let gain = &l.post_ffn_gain;
            elementwise(
                g,
                "tf_moe_mul_cols",
                &mut ws.r,
                &[gain],
                &[],
                Some(h),
                n * h,
            )?;
            ops::rms_norm(g, &ws.r, &ws.ones_hidden, d.post_eps, n, &mut ws.rn)?;
            let (al, be) = &l.ffn_gate;
            need("muse gated add", "alpha", al.len().min(be.len()), h)?;
            elementwise(
                g,
                "tf_muse_gated_add",
                &mut ws.x,
                &[&ws.rn, al, be],
                &[],
                Some(h),
                n * h,
            )?;
        }
        // Head: final norm, lm_head, output multiplier, softcap.
        ops::rms_norm(g, &ws.x, &self.final_gain, d.eps, n, &mut ws.a)?;
        ops::matmul(g, &self.head, &ws.a, n, &mut ws.logits)?;
        let scalars = [d.multiplier, d.softcap];
        elementwise(
            g,
            "tf_muse_softcap",
            &mut ws.logits,
            &[],
            &scalars,
            None,
            n * d.vocab,
        )
    }
}
