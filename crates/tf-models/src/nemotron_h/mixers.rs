//! The four Nemotron-H mixers over a round of rows: each reads the normed input `h` (`[n, hidden]`)
//! and writes its output `o` (`[n, hidden]`), which the caller adds to the residual.
//!
//! Projections are one matmul over every row of the round; the recurrent Mamba step runs row by
//! row in round order (a stream's rows come in ascending position), each row on its own
//! stream's state; attention reads each row's own stream's cache.

use super::layers::{AttnLayer, MambaLayer, Mlp, MoeLayer};
use crate::error::ModelError;
use crate::model::{Row, StreamState};
use tf_kernels::matmul::matmul;
use tf_kernels::ops::{
    add_inplace, attend, combine, mamba_step, relu2, rms_norm_gated, route, AttnScratch, Pick,
    RouteScratch,
};
use tf_kernels::pool::Pool;

/// Buffers of one round, grown to the largest round seen and reused.
#[derive(Default)]
pub struct Scratch {
    proj: Vec<f32>,
    z: Vec<f32>,
    y: Vec<f32>,
    yn: Vec<f32>,
    conv: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    attn: Vec<f32>,
    up: Vec<f32>,
    act: Vec<f32>,
    gates: Vec<f32>,
    picks: Vec<Pick>,
    latent: Vec<f32>,
    gathered: Vec<f32>,
    expert_out: Vec<f32>,
    pick_out: Vec<f32>,
    combined: Vec<f32>,
    shared: Vec<f32>,
    route: RouteScratch,
    attn_scratch: Option<AttnScratch>,
}

/// `buf` resized to `len` (contents unspecified) and returned as a slice.
pub fn sized(buf: &mut Vec<f32>, len: usize) -> &mut [f32] {
    buf.resize(len, 0.0);
    &mut buf[..len]
}

/// Adds `bias` to every row of `x`.
fn add_rows(x: &mut [f32], bias: &[f32]) {
    for row in x.chunks_exact_mut(bias.len()) {
        for (a, b) in row.iter_mut().zip(bias) {
            *a += b;
        }
    }
}

/// `y = W x (+ bias)` for `n` rows.
fn linear(
    w: &tf_kernels::matmul::PackedMatrix,
    bias: Option<&[f32]>,
    x: &[f32],
    n: usize,
    y: &mut [f32],
    pool: &Pool,
) -> Result<(), ModelError> {
    matmul(w, x, n, y, pool)?;
    if let Some(b) = bias {
        add_rows(y, b);
    }
    Ok(())
}

/// Mamba2: in_proj → (per row, in order) conv + SSM step → gated group norm → out_proj.
#[allow(clippy::too_many_arguments)]
pub fn mamba(
    l: &MambaLayer,
    rows: &[Row],
    states: &mut [&mut StreamState],
    h: &[f32],
    o: &mut [f32],
    eps: f32,
    s: &mut Scratch,
    pool: &Pool,
) -> Result<(), ModelError> {
    let n = rows.len();
    let p = l.params();
    p.validate()?;
    let (inner, cd, nh) = (p.inner(), p.conv_dim(), p.n_heads);
    let width = inner + cd + nh;
    let proj = sized(&mut s.proj, n * width);
    linear(&l.in_proj, l.in_bias.as_deref(), h, n, proj, pool)?;
    let z = sized(&mut s.z, n * inner);
    let y = sized(&mut s.y, n * inner);
    let conv = sized(&mut s.conv, cd);
    for (i, r) in rows.iter().enumerate() {
        let pr = &proj[i * width..(i + 1) * width];
        z[i * inner..(i + 1) * inner].copy_from_slice(&pr[..inner]);
        let state = states[r.stream]
            .mamba
            .get_mut(l.state_index)
            .ok_or_else(|| ModelError::Kernel("stream state lacks a Mamba layer".into()))?;
        mamba_step(
            &p,
            state,
            &pr[inner..inner + cd],
            &pr[inner + cd..],
            conv,
            &mut y[i * inner..(i + 1) * inner],
        )?;
    }
    let yn = sized(&mut s.yn, n * inner);
    rms_norm_gated(y, z, &l.norm, eps, p.n_groups, n, yn)?;
    linear(&l.out_proj, l.out_bias.as_deref(), yn, n, o, pool)
}

/// Attention without RoPE: q/k/v → append k, v to each row's stream → attend over its keys.
pub fn attention(
    l: &AttnLayer,
    rows: &[Row],
    states: &mut [&mut StreamState],
    h: &[f32],
    o: &mut [f32],
    s: &mut Scratch,
    pool: &Pool,
) -> Result<(), ModelError> {
    let n = rows.len();
    let ap = &l.params;
    let (qw, kw) = (ap.n_heads * ap.head_dim, ap.n_kv_heads * ap.head_dim);
    let b = l.biases.as_ref();
    let q = sized(&mut s.q, n * qw);
    linear(&l.q, b.map(|b| &b[0][..]), h, n, q, pool)?;
    let k = sized(&mut s.k, n * kw);
    linear(&l.k, b.map(|b| &b[1][..]), h, n, k, pool)?;
    let v = sized(&mut s.v, n * kw);
    linear(&l.v, b.map(|b| &b[2][..]), h, n, v, pool)?;
    let missing = || ModelError::Kernel("stream state lacks an attention layer".into());
    for (i, r) in rows.iter().enumerate() {
        let kv = states[r.stream]
            .kv
            .layer_mut(l.kv_index)
            .ok_or_else(missing)?;
        kv.append(&k[i * kw..(i + 1) * kw], &v[i * kw..(i + 1) * kw])?;
    }
    let out = sized(&mut s.attn, n * qw);
    let scratch = s.attn_scratch.get_or_insert_with(AttnScratch::new);
    for (i, r) in rows.iter().enumerate() {
        let cache = states[r.stream].kv.layer(l.kv_index).ok_or_else(missing)?;
        attend(
            &q[i * qw..(i + 1) * qw],
            cache,
            r.pos,
            ap,
            &mut out[i * qw..(i + 1) * qw],
            scratch,
        )?;
    }
    linear(&l.o, b.map(|b| &b[3][..]), out, n, o, pool)
}

/// relu² MLP: `down(relu2(up(x)))` for `n` rows of `x`, into `o`.
fn mlp_rows(
    m: &Mlp,
    x: &[f32],
    n: usize,
    o: &mut [f32],
    up: &mut Vec<f32>,
    act: &mut Vec<f32>,
    pool: &Pool,
) -> Result<(), ModelError> {
    let width = m.up.rows();
    let b = m.biases.as_ref();
    let u = sized(up, n * width);
    linear(&m.up, b.map(|b| &b[0][..]), x, n, u, pool)?;
    let a = sized(act, n * width);
    relu2(u, a)?;
    linear(&m.down, b.map(|b| &b[1][..]), a, n, o, pool)
}

/// The dense relu² MLP block.
pub fn mlp(
    m: &Mlp,
    h: &[f32],
    n: usize,
    o: &mut [f32],
    s: &mut Scratch,
    pool: &Pool,
) -> Result<(), ModelError> {
    mlp_rows(m, h, n, o, &mut s.up, &mut s.act, pool)
}

/// MoE in mlx-lm's order: router gemv → routing (per row) → fc1_latent_proj → routed experts
/// (rows grouped by expert; each row's result does not depend on the group) → combine in pick
/// order → fc2_latent_proj → + shared expert (on the normed input).
pub fn moe(
    l: &MoeLayer,
    h: &[f32],
    n: usize,
    hidden: usize,
    o: &mut [f32],
    s: &mut Scratch,
    pool: &Pool,
) -> Result<(), ModelError> {
    let rp = &l.route;
    let (ne, k, d) = (rp.n_experts, rp.top_k, l.expert_dim);
    let gates = sized(&mut s.gates, n * ne);
    matmul(&l.gate, h, n, gates, pool)?;
    s.picks.resize(
        n * k,
        Pick {
            expert: 0,
            weight: 0.0,
        },
    );
    for i in 0..n {
        route(
            &gates[i * ne..(i + 1) * ne],
            &l.correction,
            rp,
            &mut s.route,
            &mut s.picks[i * k..(i + 1) * k],
        )?;
    }
    let xe: &[f32] = match &l.latent {
        Some((fc1, _)) => {
            let lat = sized(&mut s.latent, n * d);
            matmul(fc1, h, n, lat, pool)?;
            lat
        }
        None => h,
    };
    let pick_out = sized(&mut s.pick_out, n * k * d);
    let mut members: Vec<usize> = Vec::with_capacity(n * k);
    for (e, expert) in l.experts.iter().enumerate() {
        members.clear();
        members.extend((0..n * k).filter(|&j| s.picks[j].expert as usize == e));
        let m = members.len();
        if m == 0 {
            continue;
        }
        let g = sized(&mut s.gathered, m * d);
        for (t, &j) in members.iter().enumerate() {
            let i = j / k;
            g[t * d..(t + 1) * d].copy_from_slice(&xe[i * d..(i + 1) * d]);
        }
        let out = sized(&mut s.expert_out, m * d);
        mlp_rows(expert, g, m, out, &mut s.up, &mut s.act, pool)?;
        for (t, &j) in members.iter().enumerate() {
            pick_out[j * d..(j + 1) * d].copy_from_slice(&out[t * d..(t + 1) * d]);
        }
    }
    let combined = sized(&mut s.combined, n * d);
    for i in 0..n {
        combine(
            &s.picks[i * k..(i + 1) * k],
            &pick_out[i * k * d..(i + 1) * k * d],
            &mut combined[i * d..(i + 1) * d],
        )?;
    }
    match &l.latent {
        Some((_, fc2)) => matmul(fc2, combined, n, o, pool)?,
        None => o.copy_from_slice(combined),
    }
    if let Some(sh) = &l.shared {
        let so = sized(&mut s.shared, n * hidden);
        mlp_rows(sh, h, n, so, &mut s.up, &mut s.act, pool)?;
        add_inplace(o, so)?;
    }
    Ok(())
}
