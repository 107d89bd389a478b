//! The quant decoders of kernels/common.cuh compiled for the host with a C++ compiler (no GPU):
//! every element of random Q4_K, Q6_K and MLX rows (every width, group size and scale dtype,
//! MLX through the upload re-layout) must have the CPU decode's bits, and each planted decoder
//! must differ. Skipped, with a message, when no C++ compiler is found (`$CXX`, else `c++`);
//! `TF_CUDA_REQUIRE_CXX=1` makes that a failure.

use crate::suite::packed::HostWeights;
use crate::weights::{device_bytes, GpuFormat};
use std::io::Write;
use std::process::Command;
use tf_kernels::contract::Rng;
use tf_kernels::matmul::{embedding_row, FloatType};

const BEGIN: &str = "// ---- quant formats begin";
const END: &str = "// ---- quant formats end ----";

/// Host stand-ins for the CUDA names the section uses.
const PRELUDE: &str = r#"
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>
#define __device__
#define __host__
#define __forceinline__ inline
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
using std::fmaf;
static inline float tf_f16(u16 h) {
    const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? std::ldexp((double)m, -24)
             : e == 31 ? (m ? NAN : INFINITY)
             : std::ldexp((double)(m | 1024), e - 25);
    return (float)(s ? -v : v);
}
static inline u16 tf_ld16(const u8* p) { u16 v; std::memcpy(&v, p, 2); return v; }
"#;

/// Reads cases (fmt, rows, cols, byte count, bytes, expected f32 values) from argv[1]; prints
/// "fmt mismatches" per case, or "rowbytes fmt" when the row size disagrees.
const MAIN: &str = r#"
template <int F> float dec(const u8* r, int k) { return tf_decode_quant<F>(r, k); }
typedef float (*Dec)(const u8*, int);
static Dec pick(int f) {
    switch (f) {
        case FMT_Q4_K: return dec<FMT_Q4_K>;
        case FMT_Q6_K: return dec<FMT_Q6_K>;
        case FMT_MLX2: return dec<FMT_MLX2>;
        case FMT_MLX3: return dec<FMT_MLX3>;
        case FMT_MLX4: return dec<FMT_MLX4>;
        case FMT_MLX5: return dec<FMT_MLX5>;
        case FMT_MLX6: return dec<FMT_MLX6>;
        case FMT_MLX8: return dec<FMT_MLX8>;
        case FMT_PLANT_Q4_K: return dec<FMT_PLANT_Q4_K>;
        case FMT_PLANT_Q6_K: return dec<FMT_PLANT_Q6_K>;
        case FMT_PLANT_MLX4: return dec<FMT_PLANT_MLX4>;
        case FMT_PLANT_MLX4_FMA: return dec<FMT_PLANT_MLX4_FMA>;
    }
    return nullptr;
}
int main(int argc, char** argv) {
    if (argc < 2) return 2;
    FILE* f = std::fopen(argv[1], "rb");
    if (!f) return 2;
    uint32_t h[4];
    while (std::fread(h, 4, 4, f) == 4) {
        const int fmt = (int)h[0], rows = (int)h[1], cols = (int)h[2];
        std::vector<u8> b(h[3]);
        std::vector<float> want((size_t)rows * cols);
        if (std::fread(b.data(), 1, b.size(), f) != b.size()) return 3;
        if (std::fread(want.data(), 4, want.size(), f) != want.size()) return 3;
        const size_t rb = tf_quant_row_bytes(fmt, cols);
        Dec d = pick(fmt);
        if (rb * rows != b.size() || !d) { std::printf("rowbytes %d\n", fmt); continue; }
        long bad = 0;
        for (int j = 0; j < rows; j++)
            for (int k = 0; k < cols; k++) {
                const float g = d(b.data() + j * rb, k);
                if (std::memcmp(&g, &want[(size_t)j * cols + k], 4) != 0) bad++;
            }
        std::printf("%d %ld\n", fmt, bad);
    }
    return 0;
}
"#;

/// The `FMT_*` id the kernels use for a format (its `GpuFormat` discriminant).
fn fmt_id(f: GpuFormat) -> u32 {
    f as u32
}

/// Appends one case: the device bytes of `w`, declared as format `id`, and the CPU decode.
fn write_case(out: &mut Vec<u8>, w: &HostWeights, id: u32) {
    let dev = device_bytes(&w.packed()).expect("device bytes");
    for v in [id, w.rows as u32, w.cols as u32, dev.len() as u32] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(&dev);
    let mut row = vec![0f32; w.cols];
    for j in 0..w.rows {
        embedding_row(&w.packed(), j, &mut row).expect("cpu row");
        row.iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
    }
}

#[test]
fn device_decoders_compiled_for_the_host_give_the_cpu_bits() {
    let Some(cxx) = crate::host_cxx::compiler() else {
        return;
    };
    let common = include_str!("../../../kernels/common.cuh");
    let (b, e) = (common.find(BEGIN), common.find(END));
    let (Some(b), Some(e)) = (b, e) else {
        panic!("common.cuh lost its quant section markers");
    };
    let source = format!("{PRELUDE}{}{MAIN}", &common[b..e]);
    let (dir, exe) = crate::host_cxx::build(&cxx, "quant", &source);
    // Cases: (weights, id they are declared as, whether they must match).
    let mut rng = Rng::new(0xc0de);
    let mut cases: Vec<(HostWeights, u32, bool)> = Vec::new();
    for (f, cols) in [(GpuFormat::Q4K, 512), (GpuFormat::Q6K, 768)] {
        let w = HostWeights::random(f, 5, cols, &mut rng);
        cases.push((w, fmt_id(f), true));
    }
    for bits in crate::quant::MLX_BITS {
        for group in [32, 64, 128] {
            for ty in [FloatType::F16, FloatType::BF16, FloatType::F32] {
                let w = HostWeights::random_mlx(bits, group, ty, 3, 384, &mut rng);
                let id = fmt_id(w.format);
                cases.push((w, id, true));
            }
        }
    }
    // Planted controls: the wrong decoders on the same bytes (ids 64..=67 in common.cuh; the
    // fused s * q + b differs only where s * q rounds, i.e. with f32 scales).
    let q4k = HostWeights::random(GpuFormat::Q4K, 2, 512, &mut rng);
    let q6k = HostWeights::random(GpuFormat::Q6K, 2, 512, &mut rng);
    let mlx4 = HostWeights::random_mlx(4, 64, FloatType::F16, 2, 256, &mut rng);
    let mlx4_f32 = HostWeights::random_mlx(4, 64, FloatType::F32, 2, 256, &mut rng);
    cases.extend([
        (q4k, 64, false),
        (q6k, 65, false),
        (mlx4, 66, false),
        (mlx4_f32, 67, false),
    ]);
    let mut data = Vec::new();
    for (w, id, _) in &cases {
        write_case(&mut data, w, *id);
    }
    let input = dir.join("cases.bin");
    std::fs::File::create(&input)
        .and_then(|mut f| f.write_all(&data))
        .expect("write cases");
    let ran = Command::new(&exe)
        .arg(&input)
        .output()
        .expect("run decoders");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        ran.status.success(),
        "decoder harness exited {}",
        ran.status
    );
    let text = String::from_utf8_lossy(&ran.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), cases.len(), "output:\n{text}");
    for ((w, id, must_match), line) in cases.iter().zip(lines) {
        let bad: i64 = line
            .strip_prefix(&format!("{id} "))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("format {id} ({:?}): {line}", w.format));
        let what = match &w.mlx {
            Some(p) => format!("{:?} g{} {:?}", w.format, p.group_size, p.scale_ty),
            None => format!("{:?}", w.format),
        };
        if *must_match {
            assert_eq!(bad, 0, "{what}: {bad} elements differ from the CPU decode");
        } else {
            assert!(bad > 0, "planted decoder {id} on {what} was not noticed");
        }
    }
}
