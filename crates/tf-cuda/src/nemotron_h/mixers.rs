//! The four Nemotron-H mixers' launches for a round of `n` rows: each reads the normed input
//! `ws.h` (`[n, hidden]`) and writes its output to `ws.o` (`[n, hidden]`), which the caller adds
//! to the residual — the CPU's `tf_models::nemotron_h::mixers` operation for operation.

use super::layers::{AttnLayer, MambaLayer, MlpLayer, MoeLayer};
use super::Workspace;
use crate::device::Gpu;
use crate::error::{CudaError, Result};
use crate::kv::GpuKv;
use crate::l2;
use crate::mamba::{self, GpuMambaState};
use crate::mma::{self, Blocks, SplitX, Tail};
use crate::moe::{self, MoeBuffers};
use crate::ops::{self, GpuRows};
use crate::weights::GpuMatrix;
use cudarc::driver::CudaSlice;

/// `y = W x (+ bias)` for `n` rows (the CPU's `linear`: matmul, then the bias added), reading
/// x's split where it has one (`ws.hs`: the same bits).
fn linear(
    g: &Gpu,
    w: &GpuMatrix,
    bias: Option<&CudaSlice<f32>>,
    x: &CudaSlice<f32>,
    split: Option<&SplitX>,
    n: usize,
    y: &mut CudaSlice<f32>,
) -> Result<()> {
    ops::matmul_of(g, w, x, split, n, y)?;
    match bias {
        Some(b) => mamba::add_bias(g, y, b, n),
        None => Ok(()),
    }
}

/// Mamba2: in_proj → conv step → SSM step (rows in round order, each on its slot's state) →
/// gated group norm (z read in place from the projection) → out_proj (asked of L2 during the
/// steps between). in_proj's z rows run beside the conv and the scan ([`in_proj_z_beside`]).
pub(super) fn mamba(
    g: &Gpu,
    m: &MambaLayer,
    state: &mut GpuMambaState,
    rows: &GpuRows,
    eps: f32,
    n: usize,
    ws: &mut Workspace,
) -> Result<()> {
    let sh = m.mixer.shape();
    let (width, inner, cd) = (sh.proj_width(), sh.inner(), sh.conv_dim());
    if m.in_proj.rows() != width {
        return Err(CudaError::Shape {
            op: "nemotron_h mamba",
            detail: format!(
                "in_proj has {} rows, [z | xBC | dt] is {width}",
                m.in_proj.rows()
            ),
        });
    }
    let z_beside = in_proj_z_beside(g, m, ws.hs.as_ref(), n, inner, &mut ws.proj)?;
    if !z_beside {
        linear(
            g,
            &m.in_proj,
            m.in_bias.as_ref(),
            &ws.h,
            ws.hs.as_ref(),
            n,
            &mut ws.proj,
        )?;
    }
    if l2::Sites::for_rows(n).within {
        l2::prefetch_whole(g, &[&m.out_proj])?;
    }
    let (mx, si) = (&m.mixer, m.state_index);
    mamba::conv_step(g, mx, &ws.proj, width, inner, state, si, rows, &mut ws.xbc)?;
    mamba::ssm_step(
        g,
        mx,
        &ws.xbc,
        &ws.proj,
        width,
        inner + cd,
        state,
        si,
        rows,
        &mut ws.y,
    )?;
    if z_beside {
        g.join_side(Z_SIDE)?;
    }
    // A wide gated norm splits yn for out_proj (the same bits either way).
    let gated = mamba::GatedNormIn {
        y: &ws.y,
        z: &ws.proj,
        z_stride: width,
        gain: &m.norm,
        eps,
        groups: m.groups,
    };
    let wide = mamba::gated_wide_blocks(inner, m.groups, n);
    let yns = match (ws.yns.as_mut().filter(|s| s.cols() == inner), wide) {
        (Some(s), Some(blocks)) => {
            mamba::gated_norm_wide(g, &gated, n, &mut ws.yn, s, blocks)?;
            ws.yns.as_ref()
        }
        _ => {
            mamba::gated_norm(g, &gated, n, &mut ws.yn)?;
            None
        }
    };
    let (bias, o) = (m.out_bias.as_ref(), &mut ws.o);
    linear(g, &m.out_proj, bias, &ws.yn, yns, n, o)
}

/// The side stream of Mamba's z rows ([`in_proj_z_beside`]).
const Z_SIDE: usize = 0;

/// Whether Mamba's in_proj runs its z rows beside the rest (unless `TF_CUDA_MAMBA_Z=0`): only the
/// gated norm reads z, so its product (side stream 0, joined before that norm; one wave of
/// blocks, so the conv's and the scan's find SMs as its blocks end) may run while the conv
/// and the scan do. Launches both parts and returns true where it does (in the mma tiles with
/// x split, no bias); launches nothing otherwise.
fn in_proj_z_beside(
    g: &Gpu,
    m: &MambaLayer,
    split: Option<&SplitX>,
    n: usize,
    inner: usize,
    proj: &mut CudaSlice<f32>,
) -> Result<bool> {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let on = *ON.get_or_init(|| std::env::var("TF_CUDA_MAMBA_Z").map_or(true, |v| v != "0"));
    let w = &m.in_proj;
    let Some(s) = split else {
        return Ok(false);
    };
    let rt = mma::tiles_a_block(w.rows(), n);
    let z = inner / 16;
    if !on || m.in_bias.is_some() || !s.serves(w, n) || !z.is_multiple_of(rt) {
        return Ok(false);
    }
    g.beside(Z_SIDE, || {
        mma::matmul_split_span(g, rt, w, s, n, proj, 0..z, Blocks::OneWave, Tail::Plain)
    })?;
    let rest = z..w.rows().div_ceil(16);
    mma::matmul_split_span(g, rt, w, s, n, proj, rest, Blocks::Every, Tail::Plain)?;
    Ok(true)
}

/// Attention without RoPE: q/k/v → append k, v at each row's slot and position → attend over
/// the slot's keys `0..=pos` → o. k and v run beside q, on the side streams: each reads only
/// `ws.h` and writes only its own buffer, so the bits are the same.
pub(super) fn attention(
    g: &Gpu,
    a: &AttnLayer,
    kv: &mut GpuKv,
    rows: &GpuRows,
    n: usize,
    ws: &mut Workspace,
) -> Result<()> {
    let b = a.biases.as_ref();
    let (x, s) = (&ws.h, ws.hs.as_ref());
    g.beside(0, || linear(g, &a.k, b.map(|b| &b[1]), x, s, n, &mut ws.k))?;
    g.beside(1, || linear(g, &a.v, b.map(|b| &b[2]), x, s, n, &mut ws.v))?;
    linear(g, &a.q, b.map(|b| &b[0]), x, s, n, &mut ws.q)?;
    if l2::Sites::for_rows(n).within {
        l2::prefetch_whole(g, &[&a.o])?;
    }
    g.join_side(0)?;
    g.join_side(1)?;
    ops::kv_append(g, &ws.k, &ws.v, kv, rows, 0)?;
    ops::attend(g, &ws.q, kv, rows, 0, &a.shape, &mut ws.attn)?;
    linear(g, &a.o, b.map(|b| &b[3]), &ws.attn, None, n, &mut ws.o)
}

/// relu² MLP over `n` rows of `x` (and its split, if any): `down(relu2(up(x)))` into `out`.
#[allow(clippy::too_many_arguments)]
fn mlp_rows(
    g: &Gpu,
    m: &MlpLayer,
    x: &CudaSlice<f32>,
    split: Option<&SplitX>,
    n: usize,
    up: &mut CudaSlice<f32>,
    act: &mut CudaSlice<f32>,
    out: &mut CudaSlice<f32>,
) -> Result<()> {
    let b = m.biases.as_ref();
    linear(g, &m.up, b.map(|b| &b[0]), x, split, n, up)?;
    mamba::relu2(g, up, act, n * m.up.rows())?;
    linear(g, &m.down, b.map(|b| &b[1]), act, None, n, out)
}

/// The dense relu² MLP block.
pub(super) fn mlp(g: &Gpu, m: &MlpLayer, n: usize, ws: &mut Workspace) -> Result<()> {
    mlp_rows(
        g,
        m,
        &ws.h,
        ws.hs.as_ref(),
        n,
        &mut ws.up,
        &mut ws.act,
        &mut ws.o,
    )
}

/// MoE in mlx-lm's order: router → routing per row → fc1_latent_proj → routed experts →
/// combine in pick order → fc2_latent_proj → + shared expert (on the normed input; added to
/// `ws.o` by the next norm, with the residual: `x + (o + shared)`). Two branches run beside the
/// router and the routing, on the side streams: fc1 (joined before the experts) and the shared
/// expert (joined at the end; a one-token round's on capped blocks, [`shared_cap`]). Each
/// reads only `ws.h`, which nothing writes until the next layer, and writes only its own
/// buffers (`ws.latent`; `ws.up`, `ws.act`, `ws.acts`, `ws.shared`), which no other branch
/// touches; so each kernel reads what it read in order, and the bits are the same.
pub(super) fn moe(
    g: &Gpu,
    m: &MoeLayer,
    buf: &mut MoeBuffers,
    n: usize,
    ws: &mut Workspace,
) -> Result<()> {
    const FC1: usize = 0;
    const SHARED: usize = 1;
    // A one-token round's experts read its row split once: the norm's split of h, or the
    // latent row's, made beside fc1.
    let one = moe::reads_one_row(&m.experts, n);
    if let Some((fc1, _)) = &m.latent {
        g.beside(FC1, || {
            ops::matmul_of(g, fc1, &ws.h, ws.hs.as_ref(), n, &mut ws.latent)?;
            match ws.latent_split.as_mut() {
                Some(s) if one => mma::split(g, &ws.latent, 1, s),
                _ => Ok(()),
            }
        })?;
    }
    if let Some(sh) = &m.shared {
        g.beside(SHARED, || {
            let (x, s) = (&ws.h, ws.hs.as_ref());
            match (shared_cap(g), s, ws.acts.as_mut()) {
                (Some(cap), Some(s), Some(acts)) if shared_capped(sh, s, acts, n) => {
                    shared_split(g, sh, s, acts, cap, &mut ws.up, &mut ws.act, &mut ws.shared)
                }
                _ => mlp_rows(g, sh, x, s, n, &mut ws.up, &mut ws.act, &mut ws.shared),
            }
        })?;
    }
    ops::matmul_of(g, &m.gate, &ws.h, ws.hs.as_ref(), n, &mut ws.gates)?;
    moe::route(g, &m.routing, &ws.gates, &m.correction, n, buf)?;
    let (xe, xe_split) = match &m.latent {
        Some(_) => {
            g.join_side(FC1)?;
            (&ws.latent, ws.latent_split.as_ref())
        }
        None => (&ws.h, ws.hs.as_ref()),
    };
    moe::experts(g, &m.experts, xe, xe_split.filter(|_| one), buf)?;
    match &m.latent {
        Some((_, fc2)) => {
            moe::combine(g, buf, m.expert_dim, None, &mut ws.combined)?;
            ops::matmul(g, fc2, &ws.combined, n, &mut ws.o)?;
        }
        None => moe::combine(g, buf, m.expert_dim, None, &mut ws.o)?,
    }
    // The shared expert's rows are added with the residual, by the next norm.
    if m.shared.is_some() {
        g.join_side(SHARED)?;
    }
    Ok(())
}

/// At most how many blocks a one-token round's shared expert products launch: 8/11 of the
/// SMs (96 of an H100's or H200's 132), or `TF_CUDA_SHARED_CAP=B` (`0`: every block, the
/// products [`mlp_rows`] launches). Each block then takes several tiles in turn, and the SMs
/// left over stay free for the routing and the routed experts beside it (docs/perf.md,
/// session 39). The same bits.
fn shared_cap(g: &Gpu) -> Option<usize> {
    static S: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *S.get_or_init(|| match std::env::var("TF_CUDA_SHARED_CAP") {
        Ok(v) => v.parse().ok().filter(|&b| b > 0),
        Err(_) => Some(g.info().multiprocessors * 8 / 11),
    })
}

/// Whether [`shared_split`] takes this shared expert: one row, no biases, both matrices read
/// from splits (`s` of x, `acts` of relu²'s output).
fn shared_capped(m: &MlpLayer, s: &SplitX, acts: &SplitX, n: usize) -> bool {
    n == 1 && m.biases.is_none() && s.serves(&m.up, n) && acts.serves(&m.down, n)
}

/// The one-row shared expert as split products on at most `cap` blocks each: up from x's split,
/// relu² split into `acts` (by the up product itself where [`mma::relu2_fold`]), down from it
/// (the bits of [`mlp_rows`]).
#[allow(clippy::too_many_arguments)]
fn shared_split(
    g: &Gpu,
    m: &MlpLayer,
    s: &SplitX,
    acts: &mut SplitX,
    cap: usize,
    up: &mut CudaSlice<f32>,
    act: &mut CudaSlice<f32>,
    out: &mut CudaSlice<f32>,
) -> Result<()> {
    let product = |w: &GpuMatrix, x: &SplitX, y: &mut CudaSlice<f32>, tail: Tail| {
        let (rt, tiles) = (mma::tiles_a_block(w.rows(), 1), w.rows().div_ceil(16));
        mma::matmul_split_span(g, rt, w, x, 1, y, 0..tiles, Blocks::AtMost(cap), tail)
    };
    let fold = mma::relu2_fold().1;
    match fold {
        true => product(&m.up, s, up, Tail::Relu2(act, &mut *acts))?,
        false => {
            product(&m.up, s, up, Tail::Plain)?;
            moe::relu2_split(g, up, act, acts, 1, m.up.rows())?;
        }
    }
    let tail = if fold { Tail::SumsInPlace } else { Tail::Plain };
    product(&m.down, acts, out, tail)
}
