//! Test support: the host C++ compiler that the kernel emulation tests build the CUDA sources
//! with (`$CXX`, else `c++`).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The compiler, or None (the caller skips, and this says so) — unless `TF_CUDA_REQUIRE_CXX`
/// is set, when a missing compiler fails the test.
pub(crate) fn compiler() -> Option<String> {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let runs = Command::new(&cxx)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if runs {
        return Some(cxx);
    }
    assert!(
        std::env::var_os("TF_CUDA_REQUIRE_CXX").is_none(),
        "TF_CUDA_REQUIRE_CXX is set but no C++ compiler runs"
    );
    eprintln!("skipped: no C++ compiler ($CXX or c++)");
    None
}

/// kernels/common.cuh for the host: its f16 conversion through the prelude's `tf_host_f16`.
pub(crate) fn common() -> String {
    let c = include_str!("../kernels/common.cuh").replace(
        r#"asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));"#,
        "f = tf_host_f16(h);",
    );
    assert!(
        c.contains("tf_host_f16(h)"),
        "common.cuh's f16 conversion moved"
    );
    c
}

/// Host stand-ins for the CUDA names the kernels use and the emulated launch, shared by the
/// kernel emulation tests: one OS thread per CUDA thread of a block, kept for the whole grid
/// (the blocks run one after another, a barrier between them; shared memory is reused),
/// barriers for `__syncthreads`, `__syncwarp` and the warp shuffles and votes; `tf_open_io` for
/// a harness's case and output files, `TfIn` and `tf_read_all` to read its cases.
/// `tf_launch(D3 grid, threads, dynamic shared bytes, body)`; `tf_dyn_smem` is the dynamic
/// shared memory. Integer types and `TF_FULL_MASK` as common.cuh has them.
pub(crate) const SIMT_PRELUDE: &str = r#"
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
#define __launch_bounds__(...)
#define TF_FULL_MASK 0xffffffffu
#define TF_HOST_SIMT 1
static inline void tf_follow() {}
static inline void tf_lead() {}
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
using std::fmaf; using std::fminf; using std::fmaxf; using std::isnan; using std::exp;
using std::log1p; using std::fabs; using std::fmax; using std::min; using std::max;
using std::tanh;
struct uint4 { unsigned x, y, z, w; };
struct uint2 { unsigned x, y; };
struct float4 { float x, y, z, w; };
static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return uint4{a, b, c, d}; }
template <class T> static inline T __ldg(const T* p) { return *p; }
struct D3 { unsigned x, y, z; };
static thread_local D3 threadIdx, blockIdx;
static D3 blockDim, gridDim;
static std::barrier<>* tf_block_bar;
static std::vector<std::unique_ptr<std::barrier<>>> tf_warp_bars;
static float tf_shfl[64][32];
static unsigned tf_vote[64][32];
static unsigned char* tf_dyn_smem;
static inline float __int_as_float(int b) { float f; std::memcpy(&f, &b, 4); return f; }
static inline int __float_as_int(float f) { int b; std::memcpy(&b, &f, 4); return b; }
static inline void __syncthreads() { tf_block_bar->arrive_and_wait(); }
// A harness's case file (argv[1], read) and output file (argv[2], written); false if either fails.
static inline bool tf_open_io(int argc, char** argv, FILE** fi, FILE** fo) {
    if (argc < 3) return false;
    *fi = std::fopen(argv[1], "rb");
    *fo = std::fopen(argv[2], "wb");
    return *fi && *fo;
}
// A harness's case file held whole and read in order (i32, f32, runs of either, a name after
// its i32 length).
struct TfIn {
    std::vector<char> b;
    size_t at = 0;
    bool more() const { return at < b.size(); }
    int i() { int v; std::memcpy(&v, &b[at], 4); at += 4; return v; }
    float f() { float v; std::memcpy(&v, &b[at], 4); at += 4; return v; }
    std::vector<float> vf(size_t n) { std::vector<float> v(n); std::memcpy(v.data(), &b[at], 4 * n); at += 4 * n; return v; }
    std::vector<int> vi(size_t n) { std::vector<int> v(n); std::memcpy(v.data(), &b[at], 4 * n); at += 4 * n; return v; }
    std::string s() { int l = i(); std::string r(&b[at], l); at += l; return r; }
};
// All of fi into `in` (fi then closed); false if the read fails.
static inline bool tf_read_all(FILE* fi, TfIn* in) {
    std::fseek(fi, 0, SEEK_END);
    in->b.resize(std::ftell(fi));
    std::fseek(fi, 0, SEEK_SET);
    const bool ok = std::fread(in->b.data(), 1, in->b.size(), fi) == in->b.size();
    std::fclose(fi);
    return ok;
}
static inline void __syncwarp(unsigned = 0xffffffffu) { tf_warp_bars[threadIdx.x >> 5]->arrive_and_wait(); }
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
// The value lane `src` of this thread's warp holds.
static inline float tf_from_lane(float v, int src) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    tf_shfl[w][lane] = v;
    tf_warp_bars[w]->arrive_and_wait();
    const float r = tf_shfl[w][src];
    tf_warp_bars[w]->arrive_and_wait();
    return r;
}
static inline float __shfl_down_sync(unsigned, float v, int delta, int width = 32) {
    const int lane = threadIdx.x & 31;
    return tf_from_lane(v, (lane % width) + delta < width ? lane + delta : lane);
}
static inline float __shfl_xor_sync(unsigned, float v, int mask, int width = 32) {
    const int lane = threadIdx.x & 31;
    return tf_from_lane(v, (lane / width) * width + ((lane % width) ^ mask) % width);
}
static unsigned long long tf_shfl64[64][32];
static inline unsigned long long __shfl_xor_sync(unsigned, unsigned long long v, int mask, int width = 32) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    tf_shfl64[w][lane] = v;
    tf_warp_bars[w]->arrive_and_wait();
    const unsigned long long r = tf_shfl64[w][(lane / width) * width + ((lane % width) ^ mask) % width];
    tf_warp_bars[w]->arrive_and_wait();
    return r;
}
static inline int __shfl_xor_sync(unsigned m, int v, int mask, int width = 32) {
    return (int)__shfl_xor_sync(m, (unsigned long long)(unsigned)v, mask, width);
}
static inline float __shfl_sync(unsigned, float v, int src, int width = 32) {
    const int lane = threadIdx.x & 31;
    return tf_from_lane(v, (lane / width) * width + src % width);
}
static inline unsigned __shfl_sync(unsigned, unsigned v, int src, int width = 32) {
    const int lane = threadIdx.x & 31;
    return (unsigned)__float_as_int(tf_from_lane(__int_as_float((int)v), (lane / width) * width + src % width));
}
static inline int __shfl_up_sync(unsigned, int v, int delta, int width = 32) {
    const int lane = threadIdx.x & 31;
    return __float_as_int(tf_from_lane(__int_as_float(v), (lane % width) >= delta ? lane - delta : lane));
}
static inline unsigned __match_any_sync(unsigned, int v) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int lanes = std::min(32, (int)blockDim.x - 32 * w);
    tf_shfl64[w][lane] = (unsigned)v;
    tf_warp_bars[w]->arrive_and_wait();
    unsigned m = 0;
    for (int l = 0; l < lanes; l++) m |= (int)(unsigned)tf_shfl64[w][l] == v ? 1u << l : 0u;
    tf_warp_bars[w]->arrive_and_wait();
    return m;
}
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const unsigned long long v = ((unsigned long long)y << 32) | x;
    unsigned r = 0;
    for (int n = 0; n < 4; n++) r |= (unsigned)((v >> (8 * ((s >> (4 * n)) & 7))) & 255u) << (8 * n);
    return r;
}
static inline unsigned __funnelshift_r(unsigned lo, unsigned hi, int sh) {
    const unsigned long long v = ((unsigned long long)hi << 32) | lo;
    return (unsigned)(v >> (sh & 31));
}
static inline u32 atomicAdd(u32* p, u32 v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
static inline int atomicAdd(int* p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
static inline u32 atomicOr(u32* p, u32 v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }
static inline float tf_host_f16(unsigned short h) {
    const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? std::ldexp((double)m, -24)
             : e == 31 ? (m ? NAN : INFINITY)
             : std::ldexp((double)(m | 1024), e - 25);
    return (float)(s ? -v : v);
}
template <class F> static void tf_launch(D3 grid, unsigned threads, size_t smem, F f) {
    blockDim = D3{threads, 1, 1};
    gridDim = grid;
    std::vector<unsigned char> dyn(smem + 16);
    tf_dyn_smem = dyn.data() + (16 - ((uintptr_t)dyn.data() & 15)) % 16;
    std::barrier<> bar((std::ptrdiff_t)threads);
    tf_block_bar = &bar;
    tf_warp_bars.clear();
    for (unsigned w = 0; w < (threads + 31) / 32; w++)
        tf_warp_bars.emplace_back(new std::barrier<>((std::ptrdiff_t)std::min(32u, threads - 32 * w)));
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < threads; t++)
        ts.emplace_back([=, &bar] {
            threadIdx = D3{t, 0, 0};
            for (unsigned bz = 0; bz < std::max(grid.z, 1u); bz++)
                for (unsigned by = 0; by < grid.y; by++)
                    for (unsigned bx = 0; bx < grid.x; bx++) {
                        blockIdx = D3{bx, by, bz};
                        f();
                        bar.arrive_and_wait();
                    }
        });
    for (auto& t : ts) t.join();
}
"#;

/// Writes `source` as `NAME.cpp` into a fresh temporary folder and compiles it with `cxx`
/// (C++20, `-O1`, no contraction of `a * b + c`, threads); returns the folder and the
/// executable. Panics with the compiler's message if it fails.
pub(crate) fn build(cxx: &str, name: &str, source: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("tf-cuda-{name}-host-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let (src, exe) = (dir.join(format!("{name}.cpp")), dir.join(name));
    std::fs::write(&src, source).expect("write source");
    let built = Command::new(cxx)
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
        "host compile of {name} failed:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    (dir, exe)
}

/// The text of the function in `src` whose definition starts with `head`, to its closing brace.
pub(crate) fn extract(src: &str, head: &str) -> String {
    let start = src
        .find(head)
        .unwrap_or_else(|| panic!("the source lost `{head}`"));
    let open = start + src[start..].find('{').expect("a body");
    let mut depth = 0;
    for (i, ch) in src[open..].char_indices() {
        match ch {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return src[start..open + i + 1].to_string();
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced braces after `{head}`");
}

/// Little-endian f32s of an emulation's output file.
pub(crate) fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Values whose bits differ, plus the difference in length.
pub(crate) fn differing(a: &[f32], b: &[f32]) -> usize {
    a.iter()
        .zip(b)
        .filter(|(x, y)| x.to_bits() != y.to_bits())
        .count()
        + a.len().abs_diff(b.len())
}

/// Runs an emulation built by [`build`] as `exe INPUT OUTPUT`, with `input` written to
/// `dir/LABEL.in`; returns what it wrote to `dir/LABEL.out`. Panics (naming `label`) if it
/// fails.
pub(crate) fn run(dir: &Path, exe: &Path, label: &str, input: &[u8]) -> Vec<u8> {
    let (inp, out) = (
        dir.join(format!("{label}.in")),
        dir.join(format!("{label}.out")),
    );
    std::fs::write(&inp, input).expect("write the emulation's input");
    let ran = Command::new(exe)
        .arg(&inp)
        .arg(&out)
        .status()
        .expect("run the emulation");
    assert!(ran.success(), "{label}: the emulation exited with {ran}");
    std::fs::read(&out).expect("read the emulation's output")
}
