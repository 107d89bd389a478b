//! The kernel contract harness: accuracy against a reference and bit-for-bit row invariance.
//!
//! An operator under test is described by a [`RowOp`]: how to generate one input row from a seeded
//! [`Rng`], the width of one output row, a per-row reference (f64 output), and a [`Tolerance`].
//! [`check`] then runs the fast N-row closure and verifies:
//! 1. accuracy: every row of every call is within tolerance of the reference;
//! 2. row invariance: every row of every N-row call (N in [`CheckConfig::batch_sizes`], the rows
//!    taken from varying offsets of a seeded pool) equals the same row computed alone, bit for bit;
//! 3. repeatability: the largest call run twice gives the same bits.
//!
//! [`assert_catches`] runs the same checks on a deliberately broken closure (a planted control) and
//! fails unless the harness reports a failure, so every suite shows it is able to fail.

use std::fmt;

/// A small deterministic generator (splitmix64) for seeded test inputs.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)` with 53 random bits.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform f32 in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        (lo as f64 + (hi as f64 - lo as f64) * self.unit()) as f32
    }

    /// Approximately standard normal (sum of 4 uniforms, rescaled), as f32.
    pub fn normal(&mut self) -> f32 {
        let s: f64 = (0..4).map(|_| self.unit()).sum::<f64>() - 2.0;
        (s * 3f64.sqrt()) as f32
    }

    /// Uniform integer in `[0, n)` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.unit() * n as f64) as usize % n.max(1)
    }

    /// A vector of `n` uniform values in `[lo, hi)`.
    pub fn vec_uniform(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.uniform(lo, hi)).collect()
    }

    /// A vector of `n` approximately normal values times `scale`.
    pub fn vec_normal(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.normal() * scale).collect()
    }
}

/// Allowed distance from the reference: `|got - want| <= abs + rel * |want|`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    /// Absolute part.
    pub abs: f64,
    /// Relative part.
    pub rel: f64,
}

impl Tolerance {
    /// A tolerance with both parts.
    pub const fn new(abs: f64, rel: f64) -> Tolerance {
        Tolerance { abs, rel }
    }

    /// Whether `got` is within tolerance of `want` (NaN is never within).
    pub fn admits(&self, got: f32, want: f64) -> bool {
        let bound = self.abs + self.rel * want.abs();
        (got as f64 - want).abs() <= bound
    }
}

/// An operator as the harness sees it. `R` is one input row (any type: a vector, a (stream,
/// position, query) triple, ...); parameters shared by all rows live in the closures.
pub struct RowOp<'a, R> {
    /// Name used in failure messages.
    pub name: &'a str,
    /// Elements in one output row.
    pub out_width: usize,
    /// Allowed distance from the reference.
    pub tolerance: Tolerance,
    /// Generates input row `index` of the pool.
    pub gen_row: &'a dyn Fn(&mut Rng, usize) -> R,
    /// The plain reference: writes one output row (f64) for one input row.
    pub reference: &'a dyn Fn(&R, &mut [f64]),
}

/// Which batch sizes and inputs [`check`] uses.
#[derive(Clone, Debug)]
pub struct CheckConfig {
    /// Row counts of the calls compared against solo rows.
    pub batch_sizes: Vec<usize>,
    /// Seed of the input pool.
    pub seed: u64,
}

impl Default for CheckConfig {
    /// N = 1..=64 plus the odd sizes 67 and 100.
    fn default() -> CheckConfig {
        CheckConfig {
            batch_sizes: (1..=64).chain([67, 100]).collect(),
            seed: 0x7F4A_2024,
        }
    }
}

impl CheckConfig {
    /// A short list (1..=8, 16, 33, 67) for expensive operators.
    pub fn quick() -> CheckConfig {
        CheckConfig {
            batch_sizes: (1..=8).chain([16, 33, 67]).collect(),
            ..CheckConfig::default()
        }
    }

    /// The same sizes with another seed.
    pub fn with_seed(mut self, seed: u64) -> CheckConfig {
        self.seed = seed;
        self
    }
}

/// What a passing check measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// Largest `|got - want|` seen.
    pub max_abs_err: f64,
    /// Largest `|got - want| / (abs + rel * |want|)` seen (<= 1 when passing).
    pub max_tol_ratio: f64,
    /// Rows compared bit for bit against their solo computation.
    pub rows_compared: usize,
    /// Calls made.
    pub calls: usize,
}

/// Why a check failed.
#[derive(Clone, Debug, PartialEq)]
pub enum Failure {
    /// A closure produced the wrong number of outputs.
    OutputLength {
        /// Rows in the call.
        n_rows: usize,
        /// Expected output elements.
        expected: usize,
        /// Output elements produced.
        got: usize,
    },
    /// A value is outside the tolerance of the reference.
    Accuracy {
        /// Rows in the call.
        n_rows: usize,
        /// Pool index of the row.
        row: usize,
        /// Column in the output row.
        col: usize,
        /// Value produced.
        got: f32,
        /// Reference value.
        want: f64,
    },
    /// A row of an N-row call differs from the same row computed alone.
    RowVariance {
        /// Rows in the call.
        n_rows: usize,
        /// Index of the row inside the call.
        index_in_call: usize,
        /// Pool index of the row.
        row: usize,
        /// Column in the output row.
        col: usize,
        /// Value in the N-row call.
        batched: f32,
        /// Value when computed alone.
        solo: f32,
    },
    /// The same call run twice gave different bits.
    NotRepeatable {
        /// Rows in the call.
        n_rows: usize,
        /// Flat output index of the first difference.
        index: usize,
    },
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::OutputLength { n_rows, expected, got } => {
                write!(f, "{n_rows}-row call wrote {got} outputs, expected {expected}")
            }
            Failure::Accuracy { n_rows, row, col, got, want } => write!(
                f,
                "accuracy: row {row} col {col} in a {n_rows}-row call: got {got:e}, reference {want:e}"
            ),
            Failure::RowVariance { n_rows, index_in_call, row, col, batched, solo } => write!(
                f,
                "row invariance: row {row} (index {index_in_call} of a {n_rows}-row call) col {col}: \
                 batched {batched:e} ({:#010x}) != solo {solo:e} ({:#010x})",
                batched.to_bits(),
                solo.to_bits()
            ),
            Failure::NotRepeatable { n_rows, index } => {
                write!(f, "the same {n_rows}-row call gave different bits at output {index}")
            }
        }
    }
}

/// Runs `run` on `rows`, checking the output length.
fn call<R>(
    run: &dyn Fn(&[R], &mut [f32]),
    rows: &[R],
    width: usize,
    calls: &mut usize,
) -> Result<Vec<f32>, Failure> {
    let mut out = vec![f32::NAN; rows.len() * width];
    run(rows, &mut out);
    *calls += 1;
    if out.len() != rows.len() * width {
        return Err(Failure::OutputLength {
            n_rows: rows.len(),
            expected: rows.len() * width,
            got: out.len(),
        });
    }
    Ok(out)
}

/// Start offset of the N-row call inside the pool (varies so rows appear at many call indices).
fn offset(n: usize, spare: usize) -> usize {
    (n * 7 + 3) % (spare + 1)
}

/// Runs the accuracy, row-invariance and repeatability checks of `op` on `run`.
pub fn check<R>(
    op: &RowOp<'_, R>,
    run: &dyn Fn(&[R], &mut [f32]),
    cfg: &CheckConfig,
) -> Result<Report, Failure> {
    let w = op.out_width;
    let max_n = cfg.batch_sizes.iter().copied().max().unwrap_or(1);
    let spare = 13;
    let mut rng = Rng::new(cfg.seed);
    let pool: Vec<R> = (0..max_n + spare)
        .map(|i| (op.gen_row)(&mut rng, i))
        .collect();
    let mut report = Report {
        max_abs_err: 0.0,
        max_tol_ratio: 0.0,
        rows_compared: 0,
        calls: 0,
    };
    // Solo rows and their accuracy.
    let mut solo = Vec::with_capacity(pool.len() * w);
    let mut want = vec![0.0f64; w];
    for (i, row) in pool.iter().enumerate() {
        let got = call(run, std::slice::from_ref(row), w, &mut report.calls)?;
        (op.reference)(row, &mut want);
        for (c, (&g, &r)) in got.iter().zip(&want).enumerate() {
            if !op.tolerance.admits(g, r) {
                return Err(Failure::Accuracy {
                    n_rows: 1,
                    row: i,
                    col: c,
                    got: g,
                    want: r,
                });
            }
            let err = (g as f64 - r).abs();
            let bound = op.tolerance.abs + op.tolerance.rel * r.abs();
            report.max_abs_err = report.max_abs_err.max(err);
            if bound > 0.0 {
                report.max_tol_ratio = report.max_tol_ratio.max(err / bound);
            }
        }
        solo.extend_from_slice(&got);
    }
    // Batched calls against solo rows, bit for bit.
    for &n in &cfg.batch_sizes {
        let start = offset(n, spare);
        let rows = &pool[start..start + n];
        let got = call(run, rows, w, &mut report.calls)?;
        for (k, (gr, sr)) in got
            .chunks_exact(w.max(1))
            .zip(solo[start * w..].chunks_exact(w.max(1)))
            .enumerate()
        {
            for (c, (&b, &s)) in gr.iter().zip(sr).enumerate() {
                if b.to_bits() != s.to_bits() {
                    return Err(Failure::RowVariance {
                        n_rows: n,
                        index_in_call: k,
                        row: start + k,
                        col: c,
                        batched: b,
                        solo: s,
                    });
                }
            }
        }
        report.rows_compared += n;
    }
    // Repeatability of the largest call.
    let rows = &pool[..max_n];
    let a = call(run, rows, w, &mut report.calls)?;
    let b = call(run, rows, w, &mut report.calls)?;
    if let Some(index) = a
        .iter()
        .zip(&b)
        .position(|(x, y)| x.to_bits() != y.to_bits())
    {
        return Err(Failure::NotRepeatable {
            n_rows: max_n,
            index,
        });
    }
    Ok(report)
}

/// Asserts that `run` passes the contract of `op`; panics with the failure otherwise.
pub fn assert_contract<R>(
    op: &RowOp<'_, R>,
    run: &dyn Fn(&[R], &mut [f32]),
    cfg: &CheckConfig,
) -> Report {
    match check(op, run, cfg) {
        Ok(r) => r,
        Err(f) => panic!("kernel contract `{}` failed: {f}", op.name),
    }
}

/// Asserts that the harness catches the planted control `broken`; returns the failure it reported.
pub fn assert_catches<R>(
    op: &RowOp<'_, R>,
    broken: &dyn Fn(&[R], &mut [f32]),
    cfg: &CheckConfig,
) -> Failure {
    match check(op, broken, cfg) {
        Ok(r) => panic!(
            "planted control for `{}` was NOT caught (max abs err {:e}, {} rows compared)",
            op.name, r.max_abs_err, r.rows_compared
        ),
        Err(f) => f,
    }
}
