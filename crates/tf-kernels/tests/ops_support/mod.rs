//! Plain f64 references shared by the operator contract tests.
#![allow(dead_code)]

/// RMSNorm of one row in f64: `g * x / sqrt(mean(x^2) + eps)`.
pub fn rms_norm(x: &[f32], g: &[f32], eps: f32) -> Vec<f64> {
    let n = x.len() as f64;
    let ss: f64 = x.iter().map(|&v| (v as f64) * (v as f64)).sum();
    let r = 1.0 / (ss / n + eps as f64).sqrt();
    x.iter()
        .zip(g)
        .map(|(&v, &w)| w as f64 * v as f64 * r)
        .collect()
}

/// `x / (1 + e^-x)` in f64.
pub fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

/// Mamba2 grouped gated RMSNorm of one row in f64.
pub fn rms_norm_gated(x: &[f32], z: &[f32], g: &[f32], eps: f32, groups: usize) -> Vec<f64> {
    let h: Vec<f64> = x
        .iter()
        .zip(z)
        .map(|(&a, &b)| a as f64 * silu(b as f64))
        .collect();
    let gs = h.len() / groups;
    let mut out = Vec::with_capacity(h.len());
    for (hg, gg) in h.chunks(gs).zip(g.chunks(gs)) {
        let ss: f64 = hg.iter().map(|v| v * v).sum();
        let r = 1.0 / (ss / gs as f64 + eps as f64).sqrt();
        out.extend(hg.iter().zip(gg).map(|(v, &w)| w as f64 * v * r));
    }
    out
}

/// Softmax of a row in f64.
pub fn softmax(x: &[f64]) -> Vec<f64> {
    let m = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = x.iter().map(|v| (v - m).exp()).collect();
    let s: f64 = e.iter().sum();
    e.iter().map(|v| v / s).collect()
}

/// Log-softmax of a row in f64.
pub fn log_softmax(x: &[f64]) -> Vec<f64> {
    let m = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let s: f64 = x.iter().map(|v| (v - m).exp()).sum();
    x.iter().map(|v| v - m - s.ln()).collect()
}
