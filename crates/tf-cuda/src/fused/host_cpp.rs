//! kernels/matmul.cu, fused.cu and moe.cu compiled for the host with a C++ compiler (no GPU) and
//! run under a small SIMT emulation (one OS thread per CUDA thread, barriers for
//! `__syncthreads`, `__syncwarp` and the warp shuffles): the staged matmul (`tf_mmv`, behind the
//! `tf_matmul_<fmt>` entries), the grouped expert matmul and the column-tiled fused kernels must
//! give the CPU kernels' bits for every format, with rows whose bytes are not 16-byte aligned, a
//! matrix at an odd address and row counts across tiles; the planted controls must differ.
//! Skipped, with a message, when no C++ compiler is found (`$CXX`, else `c++`);
//! `TF_CUDA_REQUIRE_CXX=1` makes that a failure.

use crate::weights::{device_bytes, GpuFormat};
use std::io::Write;
use std::process::Command;
use tf_kernels::contract::Rng;
use tf_kernels::matmul::{matmul as cpu_matmul, FloatType};
use tf_kernels::pool::Pool;

// The suite's random packed weights (its module is private to the suite; this is the same file:
// making `suite::packed` pub(crate) would let this be a `use`).
#[allow(dead_code, clippy::duplicate_mod)]
#[path = "../suite/packed.rs"]
mod packed;
use packed::HostWeights;

/// Host stand-ins for the CUDA names the kernels use, and the emulated launch.
const PRELUDE: &str = r#"
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>
#define __device__
#define __global__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(n)
using std::fmaf; using std::isnan; using std::min; using std::max;
using std::tanh;
struct uint4 { unsigned x, y, z, w; };
static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return uint4{a, b, c, d}; }
template <class T> static inline T __ldg(const T* p) { return *p; }
struct D3 { unsigned x, y, z; };
static thread_local D3 threadIdx, blockIdx;
static D3 blockDim;
static std::barrier<>* tf_block_bar;
static std::vector<std::unique_ptr<std::barrier<>>> tf_warp_bars;
static float tf_shfl[64][32];
static unsigned char* tf_dyn_smem;
static inline float __int_as_float(int b) { float f; std::memcpy(&f, &b, 4); return f; }
static inline int __float_as_int(float f) { int b; std::memcpy(&b, &f, 4); return b; }
static inline void __syncthreads() { tf_block_bar->arrive_and_wait(); }
static unsigned tf_vote[64][32];
static inline unsigned __ballot_sync(unsigned, bool p) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    tf_vote[w][lane] = p ? 1u : 0u;
    tf_warp_bars[w]->arrive_and_wait();
    unsigned m = 0;
    for (int l = 0; l < 32; l++) m |= tf_vote[w][l] << l;
    tf_warp_bars[w]->arrive_and_wait();
    return m;
}
static inline int __popc(unsigned v) { return __builtin_popcount(v); }
static inline void __syncwarp() { tf_warp_bars[threadIdx.x >> 5]->arrive_and_wait(); }
static inline float __shfl_down_sync(unsigned, float v, int delta, int width) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    tf_shfl[w][lane] = v;
    tf_warp_bars[w]->arrive_and_wait();
    const float r = (lane % width) + delta < width ? tf_shfl[w][lane + delta] : v;
    tf_warp_bars[w]->arrive_and_wait();
    return r;
}
static inline float tf_host_f16(unsigned short h) {
    const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? std::ldexp((double)m, -24)
             : e == 31 ? (m ? NAN : INFINITY)
             : std::ldexp((double)(m | 1024), e - 25);
    return (float)(s ? -v : v);
}
template <class F> static void tf_launch(D3 grid, unsigned threads, size_t smem, F f) {
    blockDim = D3{threads, 1, 1};
    std::vector<unsigned char> dyn(smem + 16);
    tf_dyn_smem = dyn.data() + (16 - ((uintptr_t)dyn.data() & 15)) % 16;
    for (unsigned by = 0; by < grid.y; by++)
        for (unsigned bx = 0; bx < grid.x; bx++) {
            std::barrier<> bar((std::ptrdiff_t)threads);
            tf_block_bar = &bar;
            tf_warp_bars.clear();
            for (unsigned w = 0; w < (threads + 31) / 32; w++)
                tf_warp_bars.emplace_back(new std::barrier<>((std::ptrdiff_t)std::min(32u, threads - 32 * w)));
            std::vector<std::thread> ts;
            for (unsigned t = 0; t < threads; t++)
                ts.emplace_back([=] { threadIdx = D3{t, 0, 0}; blockIdx = D3{bx, by, 0}; f(); });
            for (auto& t : ts) t.join();
        }
}
"#;

/// Reads cases from argv[1], writes each case's outputs to argv[2]. A case: a kernel name
/// (u32 length + bytes), then i32 kind, fmt, rows, cols, n, experts, x_stride, byte length,
/// offset; the weight bytes; x (n * x_stride floats; kind 2: experts + 1 offsets first); for
/// fused kinds the gain (cols floats), eps and the y it starts from (n * rows floats).
/// kind 0: plain matmul, 1: grouped expert matmul, 2: fused (name picks the variant).
const MAIN: &str = r#"
typedef void (*MmFn)(const u8*, const float*, float*, int, int, int);
typedef void (*MoeFn)(const u8*, const float*, float*, const int*, int, int, int);
typedef void (*MmfFn)(const u8*, const float*, const float*, float, float*, int, int, int, int);
struct In { std::vector<char> b; size_t at = 0;
    bool more() const { return at < b.size(); }
    int i() { int v; std::memcpy(&v, &b[at], 4); at += 4; return v; }
    float f() { float v; std::memcpy(&v, &b[at], 4); at += 4; return v; }
    std::vector<float> vf(size_t n) { std::vector<float> v(n); std::memcpy(v.data(), &b[at], 4 * n); at += 4 * n; return v; }
    std::vector<int> vi(size_t n) { std::vector<int> v(n); std::memcpy(v.data(), &b[at], 4 * n); at += 4 * n; return v; }
    std::string s() { int l = i(); std::string r(&b[at], l); at += l; return r; }
};
#define MM(name) {#name, name},
static std::map<std::string, MmFn> mm = { TF_HOST_MM };
static std::map<std::string, MoeFn> moe = { TF_HOST_MOE };
static std::map<std::string, MmfFn> mmf = { TF_HOST_MMF };
int main(int argc, char** argv) {
    if (argc < 3) return 2;
    FILE* fi = std::fopen(argv[1], "rb");
    if (!fi) return 2;
    In in;
    std::fseek(fi, 0, SEEK_END); in.b.resize(std::ftell(fi)); std::fseek(fi, 0, SEEK_SET);
    if (std::fread(in.b.data(), 1, in.b.size(), fi) != in.b.size()) return 3;
    FILE* fo = std::fopen(argv[2], "wb");
    if (!fo) return 2;
    while (in.more()) {
        const std::string name = in.s();
        const int kind = in.i(), fmt = in.i(), rows = in.i(), cols = in.i(), n = in.i();
        const int experts = in.i(), xs = in.i(), len = in.i(), off = in.i();
        (void)fmt;
        // The matrix at `off` bytes into a buffer of garbage (its edges must not be read into
        // any output).
        std::vector<u8> buf(len + off + 64, 0xa5);
        std::memcpy(buf.data() + off, &in.b[in.at], len);
        in.at += len;
        const u8* W = buf.data() + off;
        std::vector<int> offs;
        if (kind == 1) offs = in.vi(experts + 1);
        auto x = in.vf((size_t)n * xs);
        const int out_rows = kind == 1 ? n : n;
        std::vector<float> y((size_t)out_rows * rows, 0.0f);
        const unsigned blocks = (unsigned)((rows * 16 + 127) / 128);
        if (kind == 0) {
            auto it = mm.find(name);
            if (it == mm.end()) return 4;
            tf_launch(D3{blocks, 1, 1}, 128, 0, [&] { it->second(W, x.data(), y.data(), n, rows, cols); });
        } else if (kind == 1) {
            auto it = moe.find(name);
            if (it == moe.end()) return 4;
            // As the launcher: a block row per possible non-empty group.
            const unsigned groups = (unsigned)std::max(1, std::min(experts, n));
            tf_launch(D3{blocks, groups, 1}, 128, 0, [&] { it->second(W, x.data(), y.data(), offs.data(), rows, cols, experts); });
        } else {
            auto it = mmf.find(name);
            if (it == mmf.end()) return 4;
            auto g = in.vf(cols);
            const float eps = in.f();
            y = in.vf((size_t)n * rows);
            const int smem = in.i();
            tf_launch(D3{(unsigned)((rows + MMF_ROWS - 1) / MMF_ROWS), 1, 1}, MMF_THREADS, smem, [&] {
                it->second(W, x.data(), g.data(), eps, y.data(), n, rows, cols, xs);
            });
        }
        std::fwrite(y.data(), 4, y.size(), fo);
    }
    std::fclose(fo);
    return 0;
}
"#;

/// Formats, their `FMT_*` ids and kernel tags.
const FORMATS: [GpuFormat; 14] = [
    GpuFormat::F32,
    GpuFormat::F16,
    GpuFormat::Bf16,
    GpuFormat::Q4_0,
    GpuFormat::Q4_1,
    GpuFormat::Q8_0,
    GpuFormat::Q4K,
    GpuFormat::Q6K,
    GpuFormat::Mlx2,
    GpuFormat::Mlx3,
    GpuFormat::Mlx4,
    GpuFormat::Mlx5,
    GpuFormat::Mlx6,
    GpuFormat::Mlx8,
];

fn compiler() -> Option<String> {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let ok = Command::new(&cxx)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then_some(cxx)
}

/// The kernel sources for the host: common.cuh (its f16 conversion through the host's),
/// matmul.cu, fused.cu, quant.cu and moe.cu, then tables of the entries the harness calls.
fn host_source() -> String {
    let common = include_str!("../../kernels/common.cuh").replace(
        r#"asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));"#,
        "f = tf_host_f16(h);",
    );
    assert!(
        common.contains("tf_host_f16(h)"),
        "common.cuh's f16 conversion moved"
    );
    let fused = include_str!("../../kernels/fused.cu").replace(
        "extern __shared__ __align__(16) u8 tf_smem[];",
        "u8* tf_smem = tf_dyn_smem;",
    );
    assert!(
        fused.contains("tf_dyn_smem"),
        "fused.cu's dynamic shared memory moved"
    );
    // Of moe.cu only the grouped expert matmuls (the rest needs no stand-ins here).
    let moe_src = include_str!("../../kernels/moe.cu");
    let (b, e) = (
        moe_src.find("// The id of the y-th expert"),
        moe_src.find("// relu²"),
    );
    let (Some(b), Some(e)) = (b, e) else {
        panic!("moe.cu lost its expert-matmul section markers");
    };
    let moe_part = &moe_src[b..e];
    let mut mm = String::new();
    let mut moe = String::new();
    let mut mmf = String::new();
    for f in FORMATS {
        let tag = f.kernel_tag();
        mm.push_str(&format!("MM(tf_matmul_{tag}) "));
        moe.push_str(&format!("MM(tf_moe_matmul_{tag}) "));
        for xf in ["none", "norm", "silu"] {
            for ep in ["store", "add"] {
                mmf.push_str(&format!("MM(tf_mmf_{tag}_{xf}_{ep}) "));
            }
        }
    }
    for p in [
        "tf_plant_matmul_q4_1_rowvar",
        "tf_plant_matmul_mlx4_fma",
        "tf_plant_matmul_mlx4_nibbles",
        "tf_ref_matmul_q4_0",
        "tf_ref_matmul_mlx4",
    ] {
        mm.push_str(&format!("MM({p}) "));
    }
    moe.push_str("MM(tf_plant_moe_matmul_q4_1_rowvar) ");
    // The old template (tf_matmul) as entries: the staged one must equal it.
    let refs = "#define TF_MATMUL_REF_ENTRY(NAME, FMT) extern \"C\" void NAME(const u8* W, \
                const float* x, float* y, int n, int rows, int cols) { \
                tf_matmul<FMT, 0>(W, x, y, n, rows, cols); }\n\
                TF_MATMUL_REF_ENTRY(tf_ref_matmul_q4_0, FMT_Q4_0)\n\
                TF_MATMUL_REF_ENTRY(tf_ref_matmul_mlx4, FMT_MLX4)\n";
    format!(
        "{PRELUDE}{common}\n{}\n{fused}\n{}\n{}\n{refs}\n#define TF_HOST_MM {mm}\n#define TF_HOST_MOE {moe}\n#define TF_HOST_MMF {mmf}\n{MAIN}",
        include_str!("../../kernels/matmul.cu"),
        include_str!("../../kernels/quant.cu"),
        moe_part,
    )
}

/// One emulated launch and the bits it must (or, for a planted control, must not) give.
struct Case {
    label: String,
    name: String,
    kind: i32,
    rows: usize,
    cols: usize,
    n: usize,
    experts: usize,
    x_stride: usize,
    bytes: Vec<u8>,
    /// Bytes of garbage before the matrix (an odd offset puts its rows off 16-byte alignment).
    off: usize,
    offsets: Vec<i32>,
    x: Vec<f32>,
    gain: Vec<f32>,
    eps: f32,
    y0: Vec<f32>,
    smem: usize,
    want: Vec<f32>,
    must_match: bool,
}

impl Case {
    fn write(&self, out: &mut Vec<u8>) {
        let put = |out: &mut Vec<u8>, v: i32| out.extend_from_slice(&v.to_le_bytes());
        put(out, self.name.len() as i32);
        out.extend_from_slice(self.name.as_bytes());
        for v in [
            self.kind,
            0,
            self.rows as i32,
            self.cols as i32,
            self.n as i32,
            self.experts as i32,
            self.x_stride as i32,
            self.bytes.len() as i32,
            self.off as i32,
        ] {
            put(out, v);
        }
        out.extend_from_slice(&self.bytes);
        self.offsets.iter().for_each(|&v| put(out, v));
        let floats = |out: &mut Vec<u8>, v: &[f32]| {
            v.iter()
                .for_each(|f| out.extend_from_slice(&f.to_le_bytes()))
        };
        floats(out, &self.x);
        if self.kind == 2 {
            floats(out, &self.gain);
            floats(out, &[self.eps]);
            floats(out, &self.y0);
            put(out, self.smem as i32);
        }
    }

    /// Output floats the harness writes.
    fn out_len(&self) -> usize {
        self.n * self.rows
    }
}

/// Random MLX weights: group 64, f32 scales for 4 bits (so s * q rounds), f16 otherwise.
fn mlx(bits: u8, rows: usize, cols: usize, rng: &mut Rng) -> HostWeights {
    let ty = if bits == 4 {
        FloatType::F32
    } else {
        FloatType::F16
    };
    HostWeights::random_mlx(bits, 64, ty, rows, cols, rng)
}

/// Random weights of `format` and their device bytes.
fn weights(format: GpuFormat, rows: usize, cols: usize, rng: &mut Rng) -> (HostWeights, Vec<u8>) {
    let w = match format {
        GpuFormat::Mlx2 => mlx(2, rows, cols, rng),
        GpuFormat::Mlx3 => mlx(3, rows, cols, rng),
        GpuFormat::Mlx4 => mlx(4, rows, cols, rng),
        GpuFormat::Mlx5 => mlx(5, rows, cols, rng),
        GpuFormat::Mlx6 => mlx(6, rows, cols, rng),
        GpuFormat::Mlx8 => mlx(8, rows, cols, rng),
        f => HostWeights::random(f, rows, cols, rng),
    };
    let dev = device_bytes(&w.packed())
        .expect("device bytes")
        .into_owned();
    (w, dev)
}

fn cpu(w: &HostWeights, x: &[f32], n: usize, pool: &Pool) -> Vec<f32> {
    let mut y = vec![0f32; n * w.rows];
    cpu_matmul(&w.packed(), x, n, &mut y, pool).expect("cpu matmul");
    y
}

/// Columns per format: several staged chunks, a partial last one, and rows whose byte length is
/// not a multiple of 16 where the format allows.
fn cols_of(f: GpuFormat) -> usize {
    match f {
        GpuFormat::F32 => 1000,
        GpuFormat::F16 | GpuFormat::Bf16 => 1000,
        GpuFormat::Q4K | GpuFormat::Q6K => 2304,
        _ => 3648,
    }
}

fn plain_cases(rng: &mut Rng, pool: &Pool) -> Vec<Case> {
    let mut cases = Vec::new();
    for (i, f) in FORMATS.iter().copied().enumerate() {
        let (rows, cols) = (11, cols_of(f));
        let (w, bytes) = weights(f, rows, cols, rng);
        for (n, off) in [(1usize, 0usize), (7, 2 + 4 * (i % 3))] {
            let x = rng.vec_uniform(n * cols, -1.0, 1.0);
            cases.push(Case {
                label: format!("{f:?} matmul n={n} off={off}"),
                name: format!("tf_matmul_{}", f.kernel_tag()),
                kind: 0,
                rows,
                cols,
                n,
                experts: 0,
                x_stride: cols,
                bytes: bytes.clone(),
                off,
                offsets: vec![],
                want: cpu(&w, &x, n, pool),
                x,
                gain: vec![],
                eps: 0.0,
                y0: vec![],
                smem: 0,
                must_match: true,
            });
        }
    }
    // The old template through reference entries (the host build adds them) and the planted
    // controls: a reversed chain order when n > 1, a wrong nibble, a fused multiply-add.
    for (f, name, must_match, ty) in [
        (GpuFormat::Q4_0, "tf_ref_matmul_q4_0", true, None),
        (GpuFormat::Mlx4, "tf_ref_matmul_mlx4", true, None),
        (GpuFormat::Q4_1, "tf_plant_matmul_q4_1_rowvar", false, None),
        (GpuFormat::Mlx4, "tf_plant_matmul_mlx4_nibbles", false, None),
        (
            GpuFormat::Mlx4,
            "tf_plant_matmul_mlx4_fma",
            false,
            Some(FloatType::F32),
        ),
    ] {
        let (rows, cols, n) = (9, 1024, 5);
        let (w, bytes) = match ty {
            Some(t) => {
                let w = HostWeights::random_mlx(4, 64, t, rows, cols, rng);
                let d = device_bytes(&w.packed())
                    .expect("device bytes")
                    .into_owned();
                (w, d)
            }
            None => weights(f, rows, cols, rng),
        };
        let x = rng.vec_uniform(n * cols, -1.0, 1.0);
        cases.push(Case {
            label: name.to_string(),
            name: name.to_string(),
            kind: 0,
            rows,
            cols,
            n,
            experts: 0,
            x_stride: cols,
            bytes,
            off: 0,
            offsets: vec![],
            want: cpu(&w, &x, n, pool),
            x,
            gain: vec![],
            eps: 0.0,
            y0: vec![],
            smem: 0,
            must_match,
        });
    }
    cases
}

/// Grouped expert matmuls: 3 experts of 9 rows stacked, one of them without rows.
fn moe_cases(rng: &mut Rng, pool: &Pool) -> Vec<Case> {
    let mut cases = Vec::new();
    let rows = 9usize;
    for (i, (f, name, must_match)) in [
        (GpuFormat::Q4_0, "tf_moe_matmul_q4_0", true),
        (GpuFormat::Mlx4, "tf_moe_matmul_mlx4", true),
        (GpuFormat::Q6K, "tf_moe_matmul_q6_k", true),
        (GpuFormat::F16, "tf_moe_matmul_f16", true),
        (GpuFormat::Q4_1, "tf_plant_moe_matmul_q4_1_rowvar", false),
    ]
    .into_iter()
    .enumerate()
    {
        // 3 experts with groups of 2, 0 and 5 rows; or 4 experts with 0, 1, 0 and 1 rows, so
        // the launch has fewer block rows (2) than experts and must skip the empty ones.
        let (e, n, offsets) = if i % 2 == 0 {
            (3usize, 7usize, vec![0i32, 2, 2, 7])
        } else {
            (4, 2, vec![0i32, 0, 1, 1, 2])
        };
        let cols = if f == GpuFormat::Q6K { 1280 } else { 1728 };
        let (w, bytes) = weights(f, e * rows, cols, rng);
        let x = rng.vec_uniform(n * cols, -1.0, 1.0);
        let all = cpu(&w, &x, n, pool);
        let mut want = vec![0f32; n * rows];
        for ex in 0..e {
            for p in offsets[ex] as usize..offsets[ex + 1] as usize {
                let src = &all[p * e * rows + ex * rows..][..rows];
                want[p * rows..][..rows].copy_from_slice(src);
            }
        }
        cases.push(Case {
            label: format!("{f:?} {name}"),
            name: name.to_string(),
            kind: 1,
            rows,
            cols,
            n,
            experts: e,
            x_stride: cols,
            bytes,
            off: 0,
            offsets: offsets.clone(),
            want,
            x,
            gain: vec![],
            eps: 0.0,
            y0: vec![],
            smem: 0,
            must_match,
        });
    }
    cases
}

/// The fused kernels over several column chunks: each transform and epilogue against the CPU's
/// rms_norm / silu_mul, matmul and add; a planted control starts the add from the wrong y.
fn fused_cases(rng: &mut Rng, pool: &Pool) -> Vec<Case> {
    use tf_kernels::ops::{rms_norm, silu_mul};
    let mut cases = Vec::new();
    let eps = 1e-5f32;
    for (i, f) in FORMATS.iter().copied().enumerate() {
        let (rows, n) = (10usize, if i % 2 == 0 { 3 } else { 6 });
        let cols = match f {
            GpuFormat::F32 | GpuFormat::F16 | GpuFormat::Bf16 => 2100,
            GpuFormat::Q4K | GpuFormat::Q6K => 2304,
            _ => 2112,
        };
        let (w, bytes) = weights(f, rows, cols, rng);
        for (xf, ep) in [
            ("none", "store"),
            ("norm", "add"),
            ("silu", "add"),
            ("norm", "store"),
        ] {
            if !(i % 3 == 0 || (xf, ep) != ("norm", "store")) {
                continue;
            }
            let in_w = if xf == "silu" { 2 * cols } else { cols };
            let x_stride = in_w + 8;
            let x = rng.vec_uniform(n * x_stride, -1.5, 1.5);
            let gain = rng.vec_uniform(cols, 0.5, 1.5);
            let mut t = vec![0f32; n * cols];
            let rows_in: Vec<f32> = (0..n)
                .flat_map(|r| x[r * x_stride..][..cols].to_vec())
                .collect();
            match xf {
                "none" => t.copy_from_slice(&rows_in),
                "norm" => rms_norm(&rows_in, &gain, eps, n, &mut t).expect("cpu rms_norm"),
                _ => {
                    let gate = rows_in;
                    let up: Vec<f32> = (0..n)
                        .flat_map(|r| x[r * x_stride + cols..][..cols].to_vec())
                        .collect();
                    silu_mul(&gate, &up, &mut t).expect("cpu silu_mul");
                }
            }
            let s = cpu(&w, &t, n, pool);
            let y0 = rng.vec_uniform(n * rows, -1.0, 1.0);
            let want: Vec<f32> = if ep == "add" {
                y0.iter().zip(&s).map(|(a, b)| a + b).collect()
            } else {
                s
            };
            let plant = i == 4 && ep == "add";
            cases.push(Case {
                label: format!(
                    "{f:?} fused {xf} {ep}{}",
                    if plant { " (planted)" } else { "" }
                ),
                name: format!("tf_mmf_{}_{xf}_{ep}", f.kernel_tag()),
                kind: 2,
                rows,
                cols,
                n,
                experts: 0,
                x_stride,
                bytes: bytes.clone(),
                off: 0,
                offsets: vec![],
                x,
                gain,
                eps,
                // Planted: the add starts from y0 + 1 ulp-ish offsets, so the sums must differ.
                y0: if plant {
                    y0.iter().map(|v| v + 0.25).collect()
                } else {
                    y0
                },
                smem: super::fused_smem_bytes_for(f, cols),
                want,
                must_match: !plant,
            });
        }
    }
    cases
}

#[test]
fn staged_and_fused_matmuls_compiled_for_the_host_give_the_cpu_bits() {
    let Some(cxx) = compiler() else {
        if std::env::var_os("TF_CUDA_REQUIRE_CXX").is_some() {
            panic!("TF_CUDA_REQUIRE_CXX is set but no C++ compiler runs");
        }
        eprintln!("skipped: no C++ compiler ($CXX or c++)");
        return;
    };
    let dir = std::env::temp_dir().join(format!("tf-cuda-mmv-host-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let src = dir.join("mmv.cpp");
    std::fs::write(&src, host_source()).expect("write source");
    let exe = dir.join("mmv");
    let built = Command::new(&cxx)
        .args([
            "-std=c++20",
            "-O1",
            "-ffp-contract=off",
            "-pthread",
            "-w",
            "-o",
        ])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("run the compiler");
    assert!(
        built.status.success(),
        "host compile failed:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let pool = Pool::new(1);
    let mut rng = Rng::new(0x3317);
    let mut cases = plain_cases(&mut rng, &pool);
    cases.extend(moe_cases(&mut rng, &pool));
    cases.extend(fused_cases(&mut rng, &pool));
    let mut data = Vec::new();
    cases.iter().for_each(|c| c.write(&mut data));
    let (input, output) = (dir.join("cases.bin"), dir.join("out.bin"));
    std::fs::File::create(&input)
        .and_then(|mut f| f.write_all(&data))
        .expect("write cases");
    let ran = Command::new(&exe)
        .arg(&input)
        .arg(&output)
        .output()
        .expect("run the harness");
    let out = std::fs::read(&output).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(ran.status.success(), "harness exited {}", ran.status);
    let floats: Vec<u32> = out
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert_eq!(
        floats.len(),
        cases.iter().map(Case::out_len).sum::<usize>(),
        "output length"
    );
    let mut at = 0;
    let mut failures = Vec::new();
    for c in &cases {
        let got = &floats[at..at + c.out_len()];
        at += c.out_len();
        let bad = got
            .iter()
            .zip(&c.want)
            .filter(|(g, w)| **g != w.to_bits())
            .count();
        if c.must_match && bad != 0 {
            failures.push(format!(
                "{}: {bad} of {} outputs differ",
                c.label,
                c.want.len()
            ));
        }
        if !c.must_match && bad == 0 {
            failures.push(format!("{}: the planted control went uncaught", c.label));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
