//! Mamba2 on the GPU (kernels/mamba.cu): the causal conv1d step with its rolling state, the
//! selective-state (SSM) step with dt softplus/clamp and the D skip, and the grouped gated
//! RMSNorm — the CPU's `tf_kernels::ops::{mamba_step, rms_norm_gated}` bit for bit — plus the
//! per-slot state pools and two Nemotron-H row helpers (relu², bias add).
//!
//! A round's rows are applied in round order per channel, so rows of one slot advance its state
//! token by token (chunked == serial). A row at position 0 starts from the zero state: resetting
//! a slot needs no device work.

use crate::device::Gpu;
use crate::error::{CudaError, Result};
use crate::launch::Launch;
use crate::mma::SplitX;
use crate::ops::{grid, i32_of, need, GpuRows};
use cudarc::driver::{CudaSlice, LaunchConfig};
use tf_kernels::ops::MambaParams;

/// Kernel entry points defined in kernels/mamba.cu.
pub const KERNEL_NAMES: &[&str] = &[
    "tf_mamba_conv",
    "tf_plant_mamba_conv_reversed",
    "tf_mamba_ssm",
    "tf_mamba_ssm_wave",
    "tf_plant_mamba_ssm_unclamped",
    "tf_plant_mamba_ssm_stale",
    "tf_mamba_gated_norm",
    PLANT_GATED_NORM_SHORT,
    "tf_nh_relu2",
    "tf_nh_add_bias",
];

/// Planted control: the gated norm's sum of squares leaves out each group's last element.
pub const PLANT_GATED_NORM_SHORT: &str = "tf_plant_mamba_gated_norm_short";

/// Largest SSM state size the kernels take (kernels/mamba.cu `MAMBA_MAX_STATE`).
pub const MAX_STATE: usize = 256;
/// Largest conv kernel width the kernels take (kernels/mamba.cu `MAMBA_MAX_KERNEL`).
pub const MAX_KERNEL: usize = 8;

/// Shape of one Mamba2 mixer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MambaShape {
    /// SSM heads.
    pub heads: usize,
    /// Channels per head.
    pub head_dim: usize,
    /// B/C groups (divides `heads`).
    pub groups: usize,
    /// State size per group.
    pub state: usize,
    /// Conv kernel width (>= 1).
    pub kernel: usize,
}

impl MambaShape {
    /// The shape of CPU parameters.
    pub fn of(p: &MambaParams) -> MambaShape {
        MambaShape {
            heads: p.n_heads,
            head_dim: p.head_dim,
            groups: p.n_groups,
            state: p.state_size,
            kernel: p.conv_kernel,
        }
    }
    /// heads × head_dim.
    pub fn inner(&self) -> usize {
        self.heads * self.head_dim
    }
    /// Channels through the conv: x, B and C.
    pub fn conv_dim(&self) -> usize {
        self.inner() + 2 * self.groups * self.state
    }
    /// Width of an `in_proj` row: `[z | xBC | dt]`.
    pub fn proj_width(&self) -> usize {
        self.inner() + self.conv_dim() + self.heads
    }
    /// Floats of one slot's conv state.
    pub fn conv_state_len(&self) -> usize {
        self.kernel.saturating_sub(1) * self.conv_dim()
    }
    /// Floats of one slot's SSM state.
    pub fn ssm_state_len(&self) -> usize {
        self.inner() * self.state
    }
    fn validate(&self) -> Result<()> {
        if self.heads == 0
            || self.head_dim == 0
            || self.state == 0
            || self.kernel == 0
            || self.groups == 0
            || !self.heads.is_multiple_of(self.groups)
        {
            return Err(CudaError::Shape {
                op: "mamba",
                detail: format!("{self:?}: all positive, groups dividing heads"),
            });
        }
        if self.state > MAX_STATE || self.kernel > MAX_KERNEL {
            return Err(CudaError::Shape {
                op: "mamba",
                detail: format!(
                    "{self:?}: the kernels hold a state of at most {MAX_STATE} and a conv kernel of at most {MAX_KERNEL} in registers"
                ),
            });
        }
        Ok(())
    }
}

/// One Mamba2 mixer's constants on the device (the recurrent part; projections are matrices).
pub struct GpuMambaMixer {
    shape: MambaShape,
    conv_weight: CudaSlice<f32>,
    conv_bias: Option<CudaSlice<f32>>,
    a: CudaSlice<f32>,
    d: CudaSlice<f32>,
    dt_bias: CudaSlice<f32>,
    dt_limit: (f32, f32),
}

impl GpuMambaMixer {
    /// Uploads the constants of CPU parameters (validated as the CPU validates them).
    pub fn upload(gpu: &Gpu, p: &MambaParams) -> Result<GpuMambaMixer> {
        p.validate().map_err(|e| CudaError::Shape {
            op: "mamba",
            detail: e.to_string(),
        })?;
        let shape = MambaShape::of(p);
        shape.validate()?;
        Ok(GpuMambaMixer {
            shape,
            conv_weight: gpu.upload(p.conv_weight)?,
            conv_bias: p.conv_bias.map(|b| gpu.upload(b)).transpose()?,
            a: gpu.upload(p.a)?,
            d: gpu.upload(p.d)?,
            dt_bias: gpu.upload(p.dt_bias)?,
            dt_limit: p.dt_limit,
        })
    }

    /// The mixer's shape.
    pub fn shape(&self) -> MambaShape {
        self.shape
    }
}

/// Where each layer's state sits in a slot: per layer (conv offset, SSM offset, shape), then
/// the conv and SSM floats of one slot.
pub(crate) type StateLayout = (Vec<(usize, usize, MambaShape)>, usize, usize);

/// The state layout of the Mamba layers `shapes` (in layer order, packed one after another).
pub(crate) fn state_layout(shapes: &[MambaShape]) -> Result<StateLayout> {
    let (mut c, mut s) = (0usize, 0usize);
    let mut layers = Vec::with_capacity(shapes.len());
    for sh in shapes {
        sh.validate()?;
        layers.push((c, s, *sh));
        c += sh.conv_state_len();
        s += sh.ssm_state_len();
    }
    Ok((layers, c, s))
}

/// Conv and SSM state of every Mamba layer for `slots` stream slots, in two pools allocated once
/// (`[slot][layers' states]`, exact f32).
pub struct GpuMambaState {
    conv: CudaSlice<f32>,
    ssm: CudaSlice<f32>,
    slots: usize,
    /// Per layer: (conv offset, ssm offset) inside a slot, and its shape.
    layers: Vec<(usize, usize, MambaShape)>,
    conv_stride: usize,
    ssm_stride: usize,
}

impl GpuMambaState {
    /// Zeroed pools for `slots` slots of the Mamba layers `shapes` (in layer order).
    pub fn new(gpu: &Gpu, slots: usize, shapes: &[MambaShape]) -> Result<GpuMambaState> {
        let (layers, c, s) = state_layout(shapes)?;
        let total = |per: usize| {
            per.checked_mul(slots)
                .filter(|_| per <= i32::MAX as usize && slots <= i32::MAX as usize)
                .ok_or_else(|| CudaError::Shape {
                    op: "mamba state",
                    detail: format!("{slots} slots x {per} floats exceeds the indexing"),
                })
        };
        Ok(GpuMambaState {
            conv: gpu.zeros(total(c)?)?,
            ssm: gpu.zeros(total(s)?)?,
            slots,
            layers,
            conv_stride: c,
            ssm_stride: s,
        })
    }

    /// Stream slots.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Mamba layers per slot.
    pub fn layers(&self) -> usize {
        self.layers.len()
    }

    /// Device bytes of both pools.
    pub fn bytes(&self) -> usize {
        (self.conv_stride + self.ssm_stride) * self.slots * 4
    }

    /// Bytes of one slot's state (every Mamba layer).
    pub fn bytes_per_slot(&self) -> usize {
        (self.conv_stride + self.ssm_stride) * 4
    }

    fn layer(&self, layer: usize, shape: MambaShape) -> Result<(usize, usize)> {
        match self.layers.get(layer) {
            Some(&(c, s, sh)) if sh == shape => Ok((c, s)),
            Some(&(_, _, sh)) => Err(CudaError::Shape {
                op: "mamba state",
                detail: format!("layer {layer} holds {sh:?}, the mixer is {shape:?}"),
            }),
            None => Err(CudaError::Param {
                op: "mamba state",
                what: "layer",
                value: layer as f64,
                why: "beyond the state's Mamba layers",
            }),
        }
    }

    fn range(&self, slot: usize, layer: usize) -> Result<(usize, usize, MambaShape)> {
        if slot >= self.slots {
            return Err(CudaError::Param {
                op: "mamba state",
                what: "slot",
                value: slot as f64,
                why: "outside the allocated slots",
            });
        }
        let &(c, s, sh) = self.layers.get(layer).ok_or(CudaError::Param {
            op: "mamba state",
            what: "layer",
            value: layer as f64,
            why: "beyond the state's Mamba layers",
        })?;
        Ok((slot * self.conv_stride + c, slot * self.ssm_stride + s, sh))
    }

    /// Writes one slot's state of one layer (`conv`: `(kernel-1) × conv_dim`, oldest first;
    /// `ssm`: `[heads][head_dim][state]`), as the CPU's `MambaState` holds it.
    pub fn write(
        &mut self,
        gpu: &Gpu,
        slot: usize,
        layer: usize,
        conv: &[f32],
        ssm: &[f32],
    ) -> Result<()> {
        let (c, s, sh) = self.range(slot, layer)?;
        if conv.len() != sh.conv_state_len() || ssm.len() != sh.ssm_state_len() {
            return Err(CudaError::Shape {
                op: "mamba state",
                detail: format!(
                    "{} conv and {} ssm floats for {sh:?}",
                    conv.len(),
                    ssm.len()
                ),
            });
        }
        let stream = gpu.stream();
        if !conv.is_empty() {
            let mut v = self.conv.slice_mut(c..c + conv.len());
            stream
                .memcpy_htod(conv, &mut v)
                .map_err(crate::error::drv("copying to the device"))?;
        }
        let mut v = self.ssm.slice_mut(s..s + ssm.len());
        stream
            .memcpy_htod(ssm, &mut v)
            .map_err(crate::error::drv("copying to the device"))
    }

    /// Reads one slot's state of one layer back: (conv, ssm) (synchronizes).
    pub fn read(&self, gpu: &Gpu, slot: usize, layer: usize) -> Result<(Vec<f32>, Vec<f32>)> {
        let (c, s, sh) = self.range(slot, layer)?;
        let stream = gpu.stream();
        let mut conv = vec![0f32; sh.conv_state_len()];
        if !conv.is_empty() {
            stream
                .memcpy_dtoh(&self.conv.slice(c..c + conv.len()), &mut conv)
                .map_err(crate::error::drv("copying from the device"))?;
        }
        let mut ssm = vec![0f32; sh.ssm_state_len()];
        stream
            .memcpy_dtoh(&self.ssm.slice(s..s + ssm.len()), &mut ssm)
            .map_err(crate::error::drv("copying from the device"))?;
        gpu.synchronize()?;
        Ok((conv, ssm))
    }
}

/// The conv step of every row of `rows` (in order) on each row's slot state of Mamba layer
/// `layer`: the conv input of row `i` is `proj[i * proj_stride + x_off..][..conv_dim]`; the
/// output `silu(conv + bias)` goes to `out` (`[n, conv_dim]`).
#[allow(clippy::too_many_arguments)]
pub fn conv_step(
    gpu: &Gpu,
    m: &GpuMambaMixer,
    proj: &CudaSlice<f32>,
    proj_stride: usize,
    x_off: usize,
    state: &mut GpuMambaState,
    layer: usize,
    rows: &GpuRows,
    out: &mut CudaSlice<f32>,
) -> Result<()> {
    conv_step_with(
        gpu,
        "tf_mamba_conv",
        m,
        proj,
        proj_stride,
        x_off,
        state,
        layer,
        rows,
        out,
    )
}

/// [`conv_step`] through a named kernel (the planted controls use this).
#[allow(clippy::too_many_arguments)]
pub fn conv_step_with(
    gpu: &Gpu,
    kernel: &'static str,
    m: &GpuMambaMixer,
    proj: &CudaSlice<f32>,
    proj_stride: usize,
    x_off: usize,
    state: &mut GpuMambaState,
    layer: usize,
    rows: &GpuRows,
    out: &mut CudaSlice<f32>,
) -> Result<()> {
    const OP: &str = "mamba conv";
    let sh = m.shape;
    let (n, cd) = (rows.len(), sh.conv_dim());
    let (conv_off, _) = state.layer(layer, sh)?;
    if x_off + cd > proj_stride {
        return Err(CudaError::Shape {
            op: OP,
            detail: format!("x_off {x_off} + conv_dim {cd} > proj_stride {proj_stride}"),
        });
    }
    need(
        OP,
        "proj",
        proj.len(),
        n.saturating_sub(1) * proj_stride + x_off + cd,
    )?;
    need(OP, "out", out.len(), n * cd)?;
    if n == 0 {
        return Ok(());
    }
    let ints = [
        i32_of(OP, "proj_stride", proj_stride)?,
        i32_of(OP, "x_off", x_off)?,
        m.conv_bias.is_some() as i32,
    ];
    let tail = [
        i32_of(OP, "slots", state.slots)?,
        i32_of(OP, "slot stride", state.conv_stride)?,
        i32_of(OP, "layer offset", conv_off)?,
        i32_of(OP, "n", n)?,
        i32_of(OP, "conv_dim", cd)?,
        i32_of(OP, "kernel", sh.kernel)?,
    ];
    let mut b = gpu.launcher(kernel)?;
    b.arg(proj).arg(&ints[0]).arg(&ints[1]).arg(&m.conv_weight);
    // An absent bias still needs a valid pointer: the weight (never read).
    match &m.conv_bias {
        Some(bias) => b.arg(bias),
        None => b.arg(&m.conv_weight),
    };
    b.arg(&ints[2])
        .arg(&mut state.conv)
        .arg(&rows.slots)
        .arg(&rows.pos);
    for v in &tail {
        b.arg(v);
    }
    b.arg(out);
    // SAFETY: (f32*, i32, i32, f32*, f32*, i32, f32*, i32*, i32*, i32 x6, f32*) as declared;
    // lengths checked above; the kernel skips slots outside the pool.
    unsafe { b.go(grid(cd, 128), "launching mamba conv") }
}

/// The SSM step of every row of `rows` (in order): reads the conv output `xbc` (`[n, conv_dim]`)
/// and dt of row `i` at `proj[i * proj_stride + dt_off..][..heads]`; writes `y`
/// (`[n, heads × head_dim]`, D skip included) and advances each row's slot state.
#[allow(clippy::too_many_arguments)]
pub fn ssm_step(
    gpu: &Gpu,
    m: &GpuMambaMixer,
    xbc: &CudaSlice<f32>,
    proj: &CudaSlice<f32>,
    proj_stride: usize,
    dt_off: usize,
    state: &mut GpuMambaState,
    layer: usize,
    rows: &GpuRows,
    y: &mut CudaSlice<f32>,
) -> Result<()> {
    ssm_step_with(
        gpu,
        ssm_kernel(),
        m,
        xbc,
        proj,
        proj_stride,
        dt_off,
        state,
        layer,
        rows,
        y,
    )
}

/// The scan's block (kernels/mamba.cu `MAMBA_SSM_THREADS`).
const SSM_THREADS: usize = 128;

/// The scan's entry: `tf_mamba_ssm_wave` (held to 64 registers, 8 blocks an SM, so Bolt's
/// 1,024 blocks take one wave), or `tf_mamba_ssm` with `TF_CUDA_SSM_WAVE=0`; the same code, so
/// the same bits.
pub(crate) fn ssm_kernel() -> &'static str {
    static WAVE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *WAVE.get_or_init(|| std::env::var("TF_CUDA_SSM_WAVE").map_or(true, |v| v != "0")) {
        "tf_mamba_ssm_wave"
    } else {
        "tf_mamba_ssm"
    }
}

/// [`ssm_step`] through a named kernel (the planted controls use this).
#[allow(clippy::too_many_arguments)]
pub fn ssm_step_with(
    gpu: &Gpu,
    kernel: &'static str,
    m: &GpuMambaMixer,
    xbc: &CudaSlice<f32>,
    proj: &CudaSlice<f32>,
    proj_stride: usize,
    dt_off: usize,
    state: &mut GpuMambaState,
    layer: usize,
    rows: &GpuRows,
    y: &mut CudaSlice<f32>,
) -> Result<()> {
    const OP: &str = "mamba ssm";
    let sh = m.shape;
    let (n, cd, inner) = (rows.len(), sh.conv_dim(), sh.inner());
    let (_, ssm_off) = state.layer(layer, sh)?;
    if dt_off + sh.heads > proj_stride {
        return Err(CudaError::Shape {
            op: OP,
            detail: format!(
                "dt_off {dt_off} + heads {} > proj_stride {proj_stride}",
                sh.heads
            ),
        });
    }
    need(OP, "xbc", xbc.len(), n * cd)?;
    need(
        OP,
        "proj",
        proj.len(),
        n.saturating_sub(1) * proj_stride + dt_off + sh.heads,
    )?;
    need(OP, "y", y.len(), n * inner)?;
    if n == 0 {
        return Ok(());
    }
    let (lo, hi) = m.dt_limit;
    let head = [
        i32_of(OP, "conv_dim", cd)?,
        i32_of(OP, "proj_stride", proj_stride)?,
        i32_of(OP, "dt_off", dt_off)?,
    ];
    let tail = [
        i32_of(OP, "slots", state.slots)?,
        i32_of(OP, "slot stride", state.ssm_stride)?,
        i32_of(OP, "layer offset", ssm_off)?,
        i32_of(OP, "n", n)?,
        i32_of(OP, "heads", sh.heads)?,
        i32_of(OP, "head_dim", sh.head_dim)?,
        i32_of(OP, "groups", sh.groups)?,
        i32_of(OP, "state", sh.state)?,
    ];
    i32_of(OP, "threads", inner * 16)?;
    let mut b = gpu.launcher(kernel)?;
    b.arg(xbc)
        .arg(&head[0])
        .arg(proj)
        .arg(&head[1])
        .arg(&head[2]);
    b.arg(&m.a).arg(&m.d).arg(&m.dt_bias).arg(&lo).arg(&hi);
    b.arg(&mut state.ssm).arg(&rows.slots).arg(&rows.pos);
    for v in &tail {
        b.arg(v);
    }
    b.arg(y);
    // SAFETY: (f32*, i32, f32*, i32, i32, f32* x3, f32, f32, f32*, i32*, i32*, i32 x8, f32*)
    // as declared; lengths checked above; the kernel skips slots outside the pool.
    unsafe { b.go(grid(inner * 16, SSM_THREADS as u32), "launching mamba ssm") }
}

/// A gated norm's inputs: `h = silu(z) * y` on rows of `gain.len()` in `groups` groups, each
/// group normalised by its own RMS (with `eps`) times `gain`; `z` of row `i` at
/// `z[i * z_stride..]`.
#[derive(Clone, Copy)]
pub struct GatedNormIn<'a> {
    pub y: &'a CudaSlice<f32>,
    pub z: &'a CudaSlice<f32>,
    pub z_stride: usize,
    pub gain: &'a CudaSlice<f32>,
    pub eps: f32,
    pub groups: usize,
}

impl GatedNormIn<'_> {
    /// The shapes and eps checked for `n` rows into `out` (`op` names it in errors): the
    /// kernels' i32 arguments (z_stride, width, groups), or `None` for no rows.
    fn checked(
        &self,
        op: &'static str,
        n: usize,
        out: &CudaSlice<f32>,
    ) -> Result<Option<[i32; 3]>> {
        let (width, groups, z_stride) = (self.gain.len(), self.groups, self.z_stride);
        if width == 0 || groups == 0 || !width.is_multiple_of(groups) || z_stride < width {
            return Err(CudaError::Shape {
                op,
                detail: format!("width {width}, {groups} groups, z_stride {z_stride}"),
            });
        }
        if !(self.eps.is_finite() && self.eps >= 0.0) {
            return Err(CudaError::Param {
                op,
                what: "eps",
                value: self.eps as f64,
                why: "must be finite and >= 0",
            });
        }
        need(op, "y", self.y.len(), n * width)?;
        need(
            op,
            "z",
            self.z.len(),
            n.saturating_sub(1) * z_stride + width,
        )?;
        need(op, "out", out.len(), n * width)?;
        if n == 0 {
            return Ok(None);
        }
        Ok(Some([
            i32_of(op, "z_stride", z_stride)?,
            i32_of(op, "width", width)?,
            i32_of(op, "groups", groups)?,
        ]))
    }

    /// Pushes the arguments every gated-norm entry begins with, `ints` from [`Self::checked`]:
    /// (y, z, z_stride, gain, eps, width, groups, out).
    fn push<'b>(&'b self, b: &mut Launch<'b>, ints: &'b [i32; 3], out: &'b mut CudaSlice<f32>) {
        b.arg(self.y)
            .arg(self.z)
            .arg(&ints[0])
            .arg(self.gain)
            .arg(&self.eps)
            .arg(&ints[1])
            .arg(&ints[2])
            .arg(out);
    }
}

/// Grouped gated RMSNorm of `n` rows of `g` into `out`.
pub fn gated_norm(gpu: &Gpu, g: &GatedNormIn, n: usize, out: &mut CudaSlice<f32>) -> Result<()> {
    gated_norm_with(gpu, "tf_mamba_gated_norm", g, n, out)
}

/// Threads of a gated-norm block.
pub(crate) const GATED_NORM_THREADS: u32 = 512;

/// [`gated_norm`] through a named kernel (the planted control uses this).
pub fn gated_norm_with(
    gpu: &Gpu,
    kernel: &'static str,
    g: &GatedNormIn,
    n: usize,
    out: &mut CudaSlice<f32>,
) -> Result<()> {
    const OP: &str = "gated rms_norm";
    let Some(ints) = g.checked(OP, n, out)? else {
        return Ok(());
    };
    let mut b = gpu.launcher(kernel)?;
    g.push(&mut b, &ints, out);
    let cfg = LaunchConfig {
        grid_dim: (i32_of(OP, "n", n)? as u32, ints[2] as u32, 1),
        // A (row, group) block: few elements a thread, each with its own exp and division, on
        // the one-row step's path (128 threads were slower: docs/perf.md, session 30).
        block_dim: (GATED_NORM_THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: (f32*, f32*, i32, f32*, f32, i32, i32, f32*) as declared; lengths checked above.
    unsafe { b.go(cfg, "launching gated rms_norm") }
}

/// A wide gated norm's blocks a group by default (at most one a 64-column group).
pub const GATED_WIDE_BLOCKS: usize = 8;

/// Blocks a group for [`gated_norm_wide`] in a round of `n` rows of `width` in `groups`
/// groups, or `None` for the plain gated norm: [`GATED_WIDE_BLOCKS`] (`TF_CUDA_GATED_WIDE=B`
/// sets it, 0 none) in rounds of at most [`crate::ops::WIDE_NORM_ROWS`] rows whose groups it
/// takes ([`gated_wide_fits`]).
pub fn gated_wide_blocks(width: usize, groups: usize, n: usize) -> Option<usize> {
    static BLOCKS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let blocks = *BLOCKS.get_or_init(|| {
        std::env::var("TF_CUDA_GATED_WIDE").map_or(GATED_WIDE_BLOCKS, |v| v.parse().unwrap_or(0))
    });
    let rows = n <= crate::ops::WIDE_NORM_ROWS;
    let fits = gated_wide_fits(width, groups);
    (blocks > 0 && rows && fits).then(|| blocks.min(width / groups / crate::mma::GROUP))
}

/// Whether [`gated_norm_wide`] takes rows of `width` in `groups` groups: each group whole
/// 64-column groups (it splits them) and held by the block's threads.
fn gated_wide_fits(width: usize, groups: usize) -> bool {
    let gs = width.checked_div(groups).unwrap_or(0);
    width.is_multiple_of(groups)
        && gs > 0
        && gs.is_multiple_of(crate::mma::GROUP)
        && gs <= crate::ops::WIDE_NORM_WIDTH
}

/// [`gated_norm`] with the rows of out also split for the tensor cores' products (the bits
/// `crate::mma::split` gives from `out`), each group over `blocks` blocks
/// (`tf_mamba_gated_norm_split_wide`, kernels/norm_split.cu): every block sums the whole
/// group's squares in the same order and writes and splits its share of the group.
pub fn gated_norm_wide(
    gpu: &Gpu,
    g: &GatedNormIn,
    n: usize,
    out: &mut CudaSlice<f32>,
    split: &mut SplitX,
    blocks: usize,
) -> Result<()> {
    const OP: &str = "gated rms_norm (wide)";
    let (width, groups) = (g.gain.len(), g.groups);
    let gs = width.checked_div(groups).unwrap_or(0);
    if !gated_wide_fits(width, groups) || blocks == 0 || blocks > gs / crate::mma::GROUP {
        return Err(CudaError::Shape {
            op: OP,
            detail: format!("{blocks} blocks a group of {width} in {groups} groups"),
        });
    }
    split.check(OP, n, width)?;
    let Some(ints) = g.checked(OP, n, out)? else {
        return Ok(());
    };
    const KERNEL: &str = "tf_mamba_gated_norm_split_wide";
    // As many threads as the plain gated norm (each its own exp and division); they hold a
    // group of up to crate::ops::WIDE_NORM_WIDTH.
    let threads = GATED_NORM_THREADS as usize;
    let floats = 16 * (gs / 16 + 4) + crate::mma::GROUP * (gs / 64).div_ceil(blocks);
    crate::ops::wide_norm_launches(gpu, OP, KERNEL, threads, 4 * floats)?;
    let mut b = gpu.launcher(KERNEL)?;
    g.push(&mut b, &ints, out);
    b.arg(&mut split.parts).arg(&mut split.sums);
    let cfg = LaunchConfig {
        grid_dim: (blocks as u32, ints[2] as u32, i32_of(OP, "n", n)? as u32),
        block_dim: (threads as u32, 1, 1),
        shared_mem_bytes: 4 * floats as u32,
    };
    // SAFETY: (f32*, f32*, i32, f32*, f32, i32, i32, f32*, uint4*, f32*) as declared; lengths
    // checked above, a group held by the block's threads.
    unsafe { b.go(cfg, "launching gated rms_norm (wide)") }
}

/// relu²: `out[e] = max(x[e], 0)²` (as `tf_kernels::ops::relu2`) for the first `len` elements.
pub fn relu2(gpu: &Gpu, x: &CudaSlice<f32>, out: &mut CudaSlice<f32>, len: usize) -> Result<()> {
    need("relu2", "x", x.len(), len)?;
    need("relu2", "out", out.len(), len)?;
    let l = i32_of("relu2", "len", len)?;
    if len == 0 {
        return Ok(());
    }
    let mut b = gpu.launcher("tf_nh_relu2")?;
    b.arg(x).arg(out).arg(&l);
    // SAFETY: (f32*, f32*, i32); lengths checked above.
    unsafe { b.go(grid(len, 256), "launching relu2") }
}

/// `y[i, j] += bias[j]` for `n` rows of width `bias.len()` (the CPU's bias add after a matmul).
pub fn add_bias(gpu: &Gpu, y: &mut CudaSlice<f32>, bias: &CudaSlice<f32>, n: usize) -> Result<()> {
    let width = bias.len();
    need("add_bias", "y", y.len(), n * width)?;
    let (w, l) = (
        i32_of("add_bias", "width", width)?,
        i32_of("add_bias", "len", n * width)?,
    );
    if n == 0 || width == 0 {
        return Ok(());
    }
    let mut b = gpu.launcher("tf_nh_add_bias")?;
    b.arg(y).arg(bias).arg(&w).arg(&l);
    // SAFETY: (f32*, f32*, i32, i32); lengths checked above.
    unsafe { b.go(grid(n * width, 256), "launching add_bias") }
}

#[cfg(test)]
mod tests;
