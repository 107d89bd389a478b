//! Stacked expert weights on the device and the routed experts' MLP.

use super::KERNEL_NAMES;
use crate::device::Gpu;
use crate::error::{CudaError, Result};
use crate::weights::GpuMatrix;
use tf_kernels::matmul::PackedMatrix;

/// `n_experts` matrices of one shape and format stacked on the device: expert `e` owns rows
/// `e * rows .. (e + 1) * rows` of one matrix.
pub struct GpuExperts {
    pub(super) matrix: GpuMatrix,
    n_experts: usize,
    rows: usize,
    pub(crate) kernel: &'static str,
}

impl GpuExperts {
    /// Uploads the experts' matrices (all of one format and shape) as one stacked matrix.
    pub fn upload(gpu: &Gpu, experts: &[PackedMatrix]) -> Result<GpuExperts> {
        let first = experts.first().ok_or_else(|| CudaError::Shape {
            op: "experts upload",
            detail: "no experts".into(),
        })?;
        if let Some(m) = experts.iter().find(|m| m.rows() != first.rows()) {
            return Err(CudaError::Shape {
                op: "experts upload",
                detail: format!("an expert of {} rows beside {}", m.rows(), first.rows()),
            });
        }
        Self::stacked(GpuMatrix::concat(gpu, experts)?, experts.len())
    }

    /// `matrix` as `n_experts` experts of equal rows, stacked in order.
    pub fn stacked(matrix: GpuMatrix, n_experts: usize) -> Result<GpuExperts> {
        if n_experts == 0 || !matrix.rows().is_multiple_of(n_experts) {
            return Err(CudaError::Shape {
                op: "experts",
                detail: format!("{} rows as {n_experts} experts", matrix.rows()),
            });
        }
        let tag = matrix.format().kernel_tag();
        let kernel = KERNEL_NAMES
            .iter()
            .copied()
            .find(|k| k.strip_prefix("tf_moe_matmul_") == Some(tag))
            .ok_or_else(|| CudaError::UnsupportedFormat {
                format: format!("{:?} experts (no grouped expert matmul)", matrix.format()),
            })?;
        Ok(GpuExperts {
            kernel,
            n_experts,
            rows: matrix.rows() / n_experts,
            matrix,
        })
    }

    /// These experts in the tensor cores' tiles ([`crate::mma::tile_experts`]) where those
    /// serve them (`group_size`: their MLX groups), else as they are.
    pub fn for_products(self, gpu: &Gpu, group_size: usize) -> Result<GpuExperts> {
        if !crate::mma::serves(group_size, self.cols()) {
            return Ok(self);
        }
        match crate::mma::tile_experts(gpu, &self.matrix, self.n_experts)? {
            Some(matrix) => Ok(GpuExperts { matrix, ..self }),
            None => Ok(self),
        }
    }

    /// Experts stacked.
    pub fn n_experts(&self) -> usize {
        self.n_experts
    }

    /// Output features of each expert.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input features.
    pub fn cols(&self) -> usize {
        self.matrix.cols()
    }

    /// The stacked matrix `[n_experts * rows, cols]`.
    pub fn matrix(&self) -> &GpuMatrix {
        &self.matrix
    }

    /// Bytes held on the device.
    pub fn storage_bytes(&self) -> usize {
        self.matrix.storage_bytes()
    }
}

/// The routed experts' MLP: `down(act(x))` with `act` SwiGLU (`silu(gate x) * up x`, when
/// `gate` is present) or relu² (`relu2(up x)`).
pub struct ExpertMlp {
    /// Gate projections (SwiGLU), or `None` for relu².
    pub gate: Option<GpuExperts>,
    /// Up projections `[inter, dim]` per expert.
    pub up: GpuExperts,
    /// Down projections `[dim, inter]` per expert.
    pub down: GpuExperts,
}

impl ExpertMlp {
    /// Checks the three stacks agree (expert count, widths, formats with grouped kernels).
    pub fn new(gate: Option<GpuExperts>, up: GpuExperts, down: GpuExperts) -> Result<ExpertMlp> {
        let bad = |detail: String| CudaError::Shape {
            op: "expert mlp",
            detail,
        };
        if down.cols() != up.rows() || down.n_experts() != up.n_experts() {
            return Err(bad(format!(
                "up {} x [{}, {}] and down {} x [{}, {}]",
                up.n_experts(),
                up.rows(),
                up.cols(),
                down.n_experts(),
                down.rows(),
                down.cols()
            )));
        }
        if let Some(g) = &gate {
            if g.rows() != up.rows() || g.cols() != up.cols() || g.n_experts() != up.n_experts() {
                return Err(bad(format!(
                    "gate {} x [{}, {}] beside up {} x [{}, {}]",
                    g.n_experts(),
                    g.rows(),
                    g.cols(),
                    up.n_experts(),
                    up.rows(),
                    up.cols()
                )));
            }
        }
        Ok(ExpertMlp { gate, up, down })
    }

    /// Experts.
    pub fn n_experts(&self) -> usize {
        self.up.n_experts()
    }

    /// Input width (and output width: `down.rows()`).
    pub fn dim(&self) -> usize {
        self.up.cols()
    }

    /// Output width.
    pub fn out_dim(&self) -> usize {
        self.down.rows()
    }

    /// Intermediate width.
    pub fn inter(&self) -> usize {
        self.up.rows()
    }

    /// Whether the products read their rows split once ([`crate::mma::SplitX`]): relu² experts
    /// whose up and down matrices are in the mma tiles.
    pub fn reads_split_rows(&self) -> bool {
        let tiled = |w: &GpuExperts| w.matrix.layout().is_mma();
        self.gate.is_none() && tiled(&self.up) && tiled(&self.down)
    }

    /// Bytes held on the device.
    pub fn storage_bytes(&self) -> usize {
        self.gate.as_ref().map_or(0, |g| g.storage_bytes())
            + self.up.storage_bytes()
            + self.down.storage_bytes()
    }
}
