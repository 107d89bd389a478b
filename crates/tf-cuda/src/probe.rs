//! A probe outside the program: MLX 4-bit (group 64) products of 1 to 8 rows on the tensor cores
//! (kernels/probe/mma_mlx4.cu, compiled on its own by `tf-cuda-mmaprobe`, never loaded by the
//! engine). Here: its weight layout, the variants it instantiates, and a float64 reference.

use tf_kernels::contract::Rng;

/// The probe's CUDA source (compiled alone, without kernels/common.cuh).
pub const MMA_MLX4_SOURCE: &str = include_str!("../kernels/probe/mma_mlx4.cu");

/// Columns of one scale and bias.
pub const GROUP: usize = 64;

/// One instantiation of the probe's product.
#[derive(Clone, Copy, Debug)]
pub struct MmaVariant {
    /// The kernel's name.
    pub name: &'static str,
    /// bf16 parts x is split into (2 or 3).
    pub splits: usize,
    /// Whether the codes lose their 128 in bf16 (else the epilogue subtracts 128 X).
    pub sub: bool,
    /// 16-row tiles a block.
    pub rt: usize,
    /// Warps a block, along the groups.
    pub kw: usize,
}

macro_rules! variants {
    ($($s:literal $u:literal $r:literal $k:literal),*) => {
        [$(MmaVariant {
            name: concat!("tf_probe_mma_s", $s, "_u", $u, "_r", $r, "_k", $k),
            splits: $s,
            sub: $u == 1,
            rt: $r,
            kw: $k,
        }),*]
    };
}

/// Every variant the source instantiates (its TF_PROBE_MMA lines).
/// (Few warps a block leave a matrix of few rows and many columns, mamba out's 4096 x 8192,
/// under 8 warps an SM: hence the 8 and 16.)
pub const MMA_VARIANTS: [MmaVariant; 9] = variants!(
    2 0 2 4, 3 0 2 4, 2 1 2 4, 3 1 2 4, 2 0 4 4, 2 0 2 8, 2 0 1 8, 2 0 1 16, 3 1 1 16
);

/// The name of the x-splitting kernel for `splits` parts.
pub fn split_kernel(splits: usize) -> String {
    format!("tf_probe_split_x{splits}")
}

/// An MLX-style affine 4-bit matrix: w = s * q + b per group of [`GROUP`] columns.
pub struct Mlx4 {
    pub rows: usize,
    pub cols: usize,
    /// Codes 0..16, row-major.
    pub q: Vec<u8>,
    /// Scales and biases, `[rows, cols / GROUP]`.
    pub s: Vec<f32>,
    pub b: Vec<f32>,
}

impl Mlx4 {
    /// Random codes, scales in [0.002, 0.02) and biases near -8 s (MLX's zero point).
    pub fn random(rows: usize, cols: usize, rng: &mut Rng) -> Mlx4 {
        assert!(
            rows.is_multiple_of(16) && cols.is_multiple_of(GROUP),
            "{rows} x {cols}"
        );
        let q = (0..rows * cols)
            .map(|_| (rng.next_u64() >> 60) as u8)
            .collect();
        let n = rows * cols / GROUP;
        let s: Vec<f32> = (0..n).map(|_| rng.uniform(0.002, 0.02)).collect();
        let b = s
            .iter()
            .map(|&s| -8.0 * s + rng.uniform(-0.01, 0.01))
            .collect();
        Mlx4 {
            rows,
            cols,
            q,
            s,
            b,
        }
    }

    /// The probe's layout: the codes as u32 words and (s, b) pairs (see the source's header).
    /// `planted`: rows g and g + 8 of each tile exchanged in the codes (a planted control).
    pub fn pack(&self, planted: bool) -> (Vec<u32>, Vec<f32>) {
        let groups = self.cols / GROUP;
        let mut words = Vec::with_capacity(self.rows * self.cols / 8);
        let mut sb = Vec::with_capacity(2 * self.rows * groups);
        for tile in 0..self.rows / 16 {
            for grp in 0..groups {
                for lane in 0..32 {
                    let (g, t) = (lane / 4, lane % 4);
                    let (r0, r1) = if planted { (g + 8, g) } else { (g, g + 8) };
                    let at =
                        |r: usize, c: usize| u32::from(self.q[(16 * tile + r) * self.cols + c]);
                    for m in 0..4 {
                        let k = GROUP * grp + 16 * m + 2 * t;
                        // Register r's low half is nibble r, its high half nibble r + 4.
                        let regs = [
                            (at(r0, k), at(r0, k + 1)),
                            (at(r1, k), at(r1, k + 1)),
                            (at(r0, k + 8), at(r0, k + 9)),
                            (at(r1, k + 8), at(r1, k + 9)),
                        ];
                        let mut w = 0u32;
                        for (r, (lo, hi)) in regs.into_iter().enumerate() {
                            w |= lo << (4 * r) | hi << (4 * (r + 4));
                        }
                        words.push(w);
                    }
                }
                for r in 0..16 {
                    let i = (16 * tile + r) * groups + grp;
                    sb.extend([self.s[i], self.b[i]]);
                }
            }
        }
        (words, sb)
    }

    /// y[j, row] = sum over columns of (s q + b) x[j, col] in float64, and the same sum of
    /// |(s q + b) x| (the scale a row's error is measured against), for the `nt` rows of x.
    pub fn reference(&self, x: &[f32], nt: usize) -> (Vec<f64>, Vec<f64>) {
        let groups = self.cols / GROUP;
        let (mut y, mut scale) = (vec![0f64; nt * self.rows], vec![0f64; nt * self.rows]);
        for j in 0..nt {
            for row in 0..self.rows {
                let (mut acc, mut abs) = (0f64, 0f64);
                for c in 0..self.cols {
                    let i = row * groups + c / GROUP;
                    let w = f64::from(self.s[i]) * f64::from(self.q[row * self.cols + c])
                        + f64::from(self.b[i]);
                    let p = w * f64::from(x[j * self.cols + c]);
                    acc += p;
                    abs += p.abs();
                }
                y[j * self.rows + row] = acc;
                scale[j * self.rows + row] = abs;
            }
        }
        (y, scale)
    }
}

/// The largest |y - reference| / (sum of |terms|) over the outputs.
pub fn max_rel_err(y: &[f32], reference: &(Vec<f64>, Vec<f64>)) -> f64 {
    y.iter()
        .zip(reference.0.iter().zip(&reference.1))
        .map(|(&v, (&r, &s))| (f64::from(v) - r).abs() / s.max(f64::MIN_POSITIVE))
        .fold(0.0, f64::max)
}

#[cfg(test)]
mod tests;
