//! Which SIMD instruction set the matmul kernels use, detected once at run time.

use std::sync::OnceLock;

/// A SIMD dispatch level. Every level computes the same arithmetic (see docs/kernels.md), so
/// results are bit-identical across levels; the level only changes speed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SimdLevel {
    /// Portable Rust (`f32::mul_add`), any target.
    Scalar,
    /// x86-64 AVX2 + FMA (+ F16C).
    Avx2,
    /// x86-64 AVX-512 F/BW/VL (+ F16C).
    Avx512,
}

impl SimdLevel {
    /// The best level this CPU supports (cached after the first call).
    pub fn detect() -> SimdLevel {
        static LEVEL: OnceLock<SimdLevel> = OnceLock::new();
        *LEVEL.get_or_init(|| {
            SimdLevel::all()
                .into_iter()
                .rev()
                .find(|l| l.is_supported())
                .unwrap_or(SimdLevel::Scalar)
        })
    }

    /// All levels, slowest first.
    pub fn all() -> [SimdLevel; 3] {
        [SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512]
    }

    /// Whether this CPU can run the level.
    pub fn is_supported(self) -> bool {
        match self {
            SimdLevel::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            SimdLevel::Avx2 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                    && std::arch::is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            SimdLevel::Avx512 => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("avx512vl")
                    && std::arch::is_x86_feature_detected!("f16c")
                    && std::arch::is_x86_feature_detected!("fma")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }
}
