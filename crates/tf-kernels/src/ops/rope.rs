//! Rotary position embedding: both pairings, partial rotary, and the default / linear / llama3 /
//! yarn frequency tables of Hugging Face transformers' rope init functions.
//!
//! Numerics (the contract):
//! - `inv_freq` is built once, in f32, step by step as transformers builds it from f32 tensors
//!   (`base ** (f32(2i) / f32(dim))` with the power evaluated in f64 and rounded once, then
//!   `1 / that` in f32; scaling steps in f32, python scalars rounded to f32).
//! - The angle for position `p` is `f32(p) * inv_freq[i]` in f32 (transformers' `inv_freq @ pos`).
//! - `cos`/`sin` of that f32 angle are evaluated in f64 and rounded to f32, then multiplied by the
//!   attention scaling (yarn's mscale; 1 otherwise) in f32.
//! - A pair `(a, b)` becomes `(a*c - b*s, b*c + a*s)`, each product rounded, no fma.

use super::error::OpError;

/// Which elements of a head form a rotated pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopePairing {
    /// GPT-J / "traditional": pairs `(2i, 2i+1)` (GGUF llama after llama.cpp's Q/K permutation).
    Interleaved,
    /// GPT-NeoX / Hugging Face `rotate_half`: pairs `(i, i + rotary_dim/2)`.
    Half,
}

/// Frequency scaling, as in config.json's `rope_scaling` / `rope_parameters`.
#[derive(Clone, Debug, PartialEq)]
pub enum RopeScaling {
    /// Plain `base^(-2i/dim)`.
    None,
    /// Position interpolation: `inv_freq / factor`.
    Linear {
        /// `factor`.
        factor: f64,
    },
    /// Llama 3.1: long wavelengths divided by `factor`, a smooth ramp between.
    Llama3 {
        /// `factor`.
        factor: f64,
        /// `low_freq_factor`.
        low_freq_factor: f64,
        /// `high_freq_factor`.
        high_freq_factor: f64,
        /// `original_max_position_embeddings`.
        original_max_position_embeddings: usize,
    },
    /// YaRN: ramped blend of interpolated and extrapolated frequencies plus an attention factor.
    Yarn {
        /// `factor` (the caller resolves it when a config derives it from max positions).
        factor: f64,
        /// `beta_fast` (transformers' default 32).
        beta_fast: f64,
        /// `beta_slow` (default 1).
        beta_slow: f64,
        /// `mscale` (optional).
        mscale: Option<f64>,
        /// `mscale_all_dim` (optional).
        mscale_all_dim: Option<f64>,
        /// `attention_factor`; when absent it is derived from `factor` and the mscales.
        attention_factor: Option<f64>,
        /// `original_max_position_embeddings`.
        original_max_position_embeddings: usize,
        /// `truncate` (default true): floor/ceil the correction range.
        truncate: bool,
    },
}

/// Everything needed to build a [`Rope`].
#[derive(Clone, Debug, PartialEq)]
pub struct RopeConfig {
    /// Elements per head.
    pub head_dim: usize,
    /// Leading elements of each head that rotate (even, `<= head_dim`); the rest pass through.
    pub rotary_dim: usize,
    /// `rope_theta` (base).
    pub theta: f64,
    /// Pair layout.
    pub pairing: RopePairing,
    /// Frequency scaling.
    pub scaling: RopeScaling,
}

/// A built rotary embedding: the f32 `inv_freq` table and attention scaling.
#[derive(Clone, Debug)]
pub struct Rope {
    cfg: RopeConfig,
    inv_freq: Vec<f32>,
    attention_scaling: f32,
}

/// Per-position `cos` and `sin` (length `rotary_dim / 2`), reusable across heads and layers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RopeAngles {
    /// The absolute position these angles are for.
    pub pos: usize,
    /// `cos(angle_i) * attention_scaling`.
    pub cos: Vec<f32>,
    /// `sin(angle_i) * attention_scaling`.
    pub sin: Vec<f32>,
}

fn bad(param: &'static str, value: f64, why: &'static str) -> OpError {
    OpError::RopeParam { param, value, why }
}

fn positive(param: &'static str, v: f64) -> Result<(), OpError> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(bad(param, v, "must be finite and > 0"))
    }
}

/// transformers' `base ** (arange(0, dim, 2).float() / dim)` in f32 (power in f64, rounded once).
fn pos_freqs(theta: f64, dim: usize) -> Vec<f32> {
    (0..dim / 2)
        .map(|i| {
            let e = (2 * i) as f32 / dim as f32;
            ((theta as f32) as f64).powf(e as f64) as f32
        })
        .collect()
}

/// YaRN's attention factor from `factor` and the optional mscales (f64, as transformers).
pub fn yarn_attention_factor(factor: f64, mscale: Option<f64>, mscale_all_dim: Option<f64>) -> f64 {
    let get = |scale: f64, m: f64| {
        if scale <= 1.0 {
            1.0
        } else {
            0.1 * m * scale.ln() + 1.0
        }
    };
    match (mscale, mscale_all_dim) {
        (Some(m), Some(a)) if m != 0.0 && a != 0.0 => get(factor, m) / get(factor, a),
        _ => get(factor, 1.0),
    }
}

/// YaRN's correction range `(low, high)` in dimension-pair units (f64, as transformers).
pub fn yarn_correction_range(
    beta_fast: f64,
    beta_slow: f64,
    dim: usize,
    theta: f64,
    original_max_position_embeddings: usize,
    truncate: bool,
) -> (f64, f64) {
    let corr = |rot: f64| {
        (dim as f64
            * (original_max_position_embeddings as f64 / (rot * 2.0 * std::f64::consts::PI)).ln())
            / (2.0 * theta.ln())
    };
    let (mut low, mut high) = (corr(beta_fast), corr(beta_slow));
    if truncate {
        low = low.floor();
        high = high.ceil();
    }
    (low.max(0.0), high.min(dim as f64 - 1.0))
}

impl Rope {
    /// Builds the `inv_freq` table; refuses bad dimensions or scaling parameters.
    pub fn new(cfg: RopeConfig) -> Result<Rope, OpError> {
        let dim = cfg.rotary_dim;
        if cfg.head_dim == 0 || dim == 0 || !dim.is_multiple_of(2) || dim > cfg.head_dim {
            return Err(bad(
                "rotary_dim",
                dim as f64,
                "must be even, > 0 and <= head_dim",
            ));
        }
        positive("rope_theta", cfg.theta)?;
        let base = pos_freqs(cfg.theta, dim);
        let default: Vec<f32> = base.iter().map(|&p| 1.0 / p).collect();
        let (inv_freq, attention_scaling) = match &cfg.scaling {
            RopeScaling::None => (default, 1.0f32),
            RopeScaling::Linear { factor } => {
                positive("factor", *factor)?;
                let f = *factor as f32;
                (default.iter().map(|&v| v / f).collect(), 1.0)
            }
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            } => {
                positive("factor", *factor)?;
                positive("low_freq_factor", *low_freq_factor)?;
                positive("high_freq_factor", *high_freq_factor)?;
                if high_freq_factor <= low_freq_factor {
                    return Err(bad(
                        "high_freq_factor",
                        *high_freq_factor,
                        "must exceed low_freq_factor",
                    ));
                }
                let old = *original_max_position_embeddings as f64;
                positive("original_max_position_embeddings", old)?;
                (
                    llama3_inv_freq(&default, *factor, *low_freq_factor, *high_freq_factor, old),
                    1.0,
                )
            }
            RopeScaling::Yarn {
                factor,
                beta_fast,
                beta_slow,
                mscale,
                mscale_all_dim,
                attention_factor,
                original_max_position_embeddings,
                truncate,
            } => {
                positive("factor", *factor)?;
                positive("beta_fast", *beta_fast)?;
                positive("beta_slow", *beta_slow)?;
                positive(
                    "original_max_position_embeddings",
                    *original_max_position_embeddings as f64,
                )?;
                let att = match attention_factor {
                    Some(a) => {
                        positive("attention_factor", *a)?;
                        *a
                    }
                    None => yarn_attention_factor(*factor, *mscale, *mscale_all_dim),
                };
                let (low, high) = yarn_correction_range(
                    *beta_fast,
                    *beta_slow,
                    dim,
                    cfg.theta,
                    *original_max_position_embeddings,
                    *truncate,
                );
                (yarn_inv_freq(&base, *factor, low, high), att as f32)
            }
        };
        Ok(Rope {
            cfg,
            inv_freq,
            attention_scaling,
        })
    }

    /// The configuration this was built from.
    pub fn config(&self) -> &RopeConfig {
        &self.cfg
    }

    /// The f32 inverse frequencies, length `rotary_dim / 2`.
    pub fn inv_freq(&self) -> &[f32] {
        &self.inv_freq
    }

    /// The factor applied to cos and sin (yarn's attention factor; 1 otherwise).
    pub fn attention_scaling(&self) -> f32 {
        self.attention_scaling
    }

    /// Fills `angles` with cos/sin for absolute position `pos`.
    pub fn angles_into(&self, pos: usize, angles: &mut RopeAngles) {
        let p = pos as f32;
        angles.pos = pos;
        angles.cos.clear();
        angles.sin.clear();
        for &f in &self.inv_freq {
            let a = (p * f) as f64;
            angles.cos.push(a.cos() as f32 * self.attention_scaling);
            angles.sin.push(a.sin() as f32 * self.attention_scaling);
        }
    }

    /// cos/sin for absolute position `pos`.
    pub fn angles(&self, pos: usize) -> RopeAngles {
        let mut a = RopeAngles::default();
        self.angles_into(pos, &mut a);
        a
    }

    /// Rotates one row of `n_heads` heads (`x.len() == n_heads * head_dim`) at position `pos`.
    pub fn apply(&self, x: &mut [f32], n_heads: usize, pos: usize) -> Result<(), OpError> {
        let angles = self.angles(pos);
        self.apply_angles(x, n_heads, &angles)
    }

    /// Rotates one row of `n_heads` heads with precomputed `angles` (from this `Rope`).
    pub fn apply_angles(
        &self,
        x: &mut [f32],
        n_heads: usize,
        angles: &RopeAngles,
    ) -> Result<(), OpError> {
        let hd = self.cfg.head_dim;
        let half = self.cfg.rotary_dim / 2;
        super::error::check_len("rope", "x", n_heads * hd, x.len())?;
        super::error::check_len("rope", "angles.cos", half, angles.cos.len())?;
        super::error::check_len("rope", "angles.sin", half, angles.sin.len())?;
        for head in x.chunks_exact_mut(hd) {
            for i in 0..half {
                let (ia, ib) = match self.cfg.pairing {
                    RopePairing::Interleaved => (2 * i, 2 * i + 1),
                    RopePairing::Half => (i, i + half),
                };
                let (c, s) = (angles.cos[i], angles.sin[i]);
                let (a, b) = (head[ia], head[ib]);
                head[ia] = a * c - b * s;
                head[ib] = b * c + a * s;
            }
        }
        Ok(())
    }

    /// Rotates `positions.len()` rows, row `r` at absolute position `positions[r]`.
    pub fn apply_rows(
        &self,
        x: &mut [f32],
        n_heads: usize,
        positions: &[usize],
    ) -> Result<(), OpError> {
        let w = n_heads * self.cfg.head_dim;
        super::error::check_len("rope", "x", positions.len() * w, x.len())?;
        let mut angles = RopeAngles::default();
        for (row, &pos) in x.chunks_exact_mut(w.max(1)).zip(positions) {
            self.angles_into(pos, &mut angles);
            self.apply_angles(row, n_heads, &angles)?;
        }
        Ok(())
    }
}

/// transformers' `_compute_llama3_parameters`, step by step in f32.
fn llama3_inv_freq(inv: &[f32], factor: f64, low: f64, high: f64, old: f64) -> Vec<f32> {
    let two_pi = (2.0 * std::f64::consts::PI) as f32;
    let low_wl = (old / low) as f32;
    let high_wl = (old / high) as f32;
    let (f, lo, span, old32) = (factor as f32, low as f32, (high - low) as f32, old as f32);
    inv.iter()
        .map(|&v| {
            // `2 * pi / inv_freq` is torch's `reciprocal(inv_freq) * (2 pi)`.
            let wavelen = (1.0 / v) * two_pi;
            if wavelen < high_wl {
                v
            } else if wavelen > low_wl {
                v / f
            } else {
                let smooth = ((1.0 / wavelen) * old32 - lo) / span;
                (1.0 - smooth) * v / f + smooth * v
            }
        })
        .collect()
}

/// transformers' `_compute_yarn_parameters` blend, step by step in f32.
fn yarn_inv_freq(pos_freqs: &[f32], factor: f64, low: f64, high: f64) -> Vec<f32> {
    let f = factor as f32;
    let high = if low == high { high + 0.001 } else { high };
    let (low32, span) = (low as f32, (high - low) as f32);
    pos_freqs
        .iter()
        .enumerate()
        .map(|(i, &p)| {
            let extra = 1.0 / p;
            let inter = 1.0 / (f * p);
            let ramp = ((i as f32 - low32) / span).clamp(0.0, 1.0);
            let extra_factor = 1.0 - ramp;
            inter * (1.0 - extra_factor) + extra * extra_factor
        })
        .collect()
}
