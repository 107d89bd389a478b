//! kernels/llama_extra.cu compiled for the host with a C++ compiler (no GPU) and run under a
//! small SIMT emulation (one OS thread per CUDA thread of a warp, a barrier for `__syncwarp` and
//! the shuffles): the bias add, the bias + residual and the per-head q/k norms over `[q | k | v]`
//! rows must give the CPU forward's bits, launched as the wrappers launch them; the planted
//! kernels must differ. Skipped, with a message, when no C++ compiler runs (`$CXX`, else `c++`);
//! `TF_CUDA_REQUIRE_CXX=1` makes that a failure.

use tf_kernels::contract::Rng;
use tf_kernels::ops::{add_inplace, rms_norm_inplace};

/// The launch these kernels' harness uses (`simt` was a mode where a block's threads ran in
/// turn; every launch now runs one OS thread per CUDA thread).
const LAUNCH: &str = "template <class F> static void tf_launch(unsigned grid, unsigned threads, bool, F f) { tf_launch(D3{grid, 1, 1}, threads, 0, f); }\n";

/// Reads cases from argv[1] and writes each case's output buffer to argv[2]. A case: i32 kind,
/// i32 plant, then kind 0 (bias rows): n, width, y, b; kind 1 (bias + residual): n, width, x,
/// s, b; kind 2 (q/k norms): n, heads, kv_heads, head_dim, f32 eps, x, gq, gk.
const MAIN: &str = r#"
static unsigned blocks(size_t items, unsigned per) { size_t g = (items + per - 1) / per; return g ? (unsigned)g : 1; }
int main(int argc, char** argv) {
    FILE *fi, *fo;
    if (!tf_open_io(argc, argv, &fi, &fo)) return 2;
    TfIn in;
    if (!tf_read_all(fi, &in)) return 3;
    while (in.more()) {
        const int kind = in.i(), plant = in.i();
        std::vector<float> out;
        if (kind == 0) {
            const int n = in.i(), w = in.i();
            out = in.vf((size_t)n * w);
            std::vector<float> b = in.vf(w);
            float* y = out.data(); const float* bp = b.data();
            tf_launch(blocks((size_t)n * w, 256), 256, false, [=] {
                if (plant) tf_plant_bias_rows_skip_last(y, bp, n, w); else tf_bias_rows(y, bp, n, w);
            });
        } else if (kind == 1) {
            const int n = in.i(), w = in.i();
            out = in.vf((size_t)n * w);
            std::vector<float> s = in.vf((size_t)n * w), b = in.vf(w);
            float* x = out.data(); const float* sp = s.data(); const float* bp = b.data();
            tf_launch(blocks((size_t)n * w, 256), 256, false, [=] {
                if (plant) tf_plant_bias_residual_reordered(x, sp, bp, n, w);
                else tf_bias_residual(x, sp, bp, n, w);
            });
        } else if (kind == 2) {
            const int n = in.i(), nh = in.i(), nkv = in.i(), hd = in.i();
            const float eps = in.f();
            const int stride = (nh + 2 * nkv) * hd;
            out = in.vf((size_t)n * stride);
            std::vector<float> gq = in.vf(hd), gk = in.vf(hd);
            float* x = out.data();
            const float* g[2] = {gq.data(), gk.data()};
            const int heads[2] = {nh, nkv}, offset[2] = {0, nh * hd};
            for (int r = 0; r < 2; r++) {
                const float* gp = g[r];
                const int h = heads[r], off = offset[r];
                tf_launch((unsigned)(n * h), 32, true, [=] {
                    if (plant) tf_plant_head_rms_norm_short(x, gp, h, hd, stride, off, eps);
                    else tf_head_rms_norm(x, gp, h, hd, stride, off, eps);
                });
            }
        } else {
            return 3;
        }
        std::fwrite(out.data(), 4, out.size(), fo);
    }
    std::fclose(fo);
    return 0;
}
"#;

fn host_source() -> String {
    let common = crate::host_cxx::common();
    format!(
        "{}{LAUNCH}\n{common}\n{}\n{MAIN}",
        crate::host_cxx::SIMT_PRELUDE,
        include_str!("../../kernels/llama_extra.cu")
    )
}

/// One case: its input record, the CPU's bits, and whether they must match (planted: differ).
struct Case {
    label: String,
    record: Vec<u8>,
    want: Vec<f32>,
    must_match: bool,
}

fn put_i(b: &mut Vec<u8>, v: usize) {
    b.extend((v as i32).to_le_bytes());
}

fn put_f(b: &mut Vec<u8>, v: &[f32]) {
    v.iter().for_each(|x| b.extend(x.to_le_bytes()));
}

/// The CPU forward's bias add (`add_rows` in tf_models::llama).
fn cpu_add_rows(x: &mut [f32], bias: &[f32]) {
    for row in x.chunks_exact_mut(bias.len()) {
        for (a, b) in row.iter_mut().zip(bias) {
            *a += b;
        }
    }
}

fn cases(rng: &mut Rng) -> Vec<Case> {
    let mut out = Vec::new();
    for plant in [false, true] {
        for (n, w) in [(1usize, 96usize), (33, 577)] {
            let (y, b) = (rng.vec_normal(n * w, 2.0), rng.vec_uniform(w, 0.5, 1.5));
            let mut want = y.clone();
            cpu_add_rows(&mut want, &b);
            let mut r = Vec::new();
            for v in [0, plant as usize, n, w] {
                put_i(&mut r, v);
            }
            put_f(&mut r, &y);
            put_f(&mut r, &b);
            out.push(Case {
                label: format!("bias_rows n {n} width {w} plant {plant}"),
                record: r,
                want,
                must_match: !plant,
            });

            let (x, s, b) = (
                rng.vec_normal(n * w, 4.0),
                rng.vec_normal(n * w, 1.0),
                rng.vec_normal(w, 1.0),
            );
            let (mut want, mut o) = (x.clone(), s.clone());
            cpu_add_rows(&mut o, &b);
            add_inplace(&mut want, &o).expect("cpu add");
            let mut r = Vec::new();
            for v in [1, plant as usize, n, w] {
                put_i(&mut r, v);
            }
            for v in [&x, &s, &b] {
                put_f(&mut r, v);
            }
            out.push(Case {
                label: format!("bias_residual n {n} width {w} plant {plant}"),
                record: r,
                want,
                must_match: !plant,
            });
        }
        for (n, nh, nkv, hd) in [(1, 4, 2, 32), (5, 4, 2, 64), (3, 3, 1, 100), (2, 2, 2, 128)] {
            let (qw, kw) = (nh * hd, nkv * hd);
            let eps = 1e-6f32;
            let mut x = rng.vec_normal(n * (qw + 2 * kw), 1.5);
            x.iter_mut()
                .enumerate()
                .for_each(|(j, v)| *v += (j % 5) as f32);
            let (gq, gk) = (rng.vec_uniform(hd, 0.5, 1.5), rng.vec_uniform(hd, 0.5, 1.5));
            let mut want = x.clone();
            for row in want.chunks_exact_mut(qw + 2 * kw) {
                rms_norm_inplace(&mut row[..qw], &gq, eps, nh).expect("cpu q norm");
                rms_norm_inplace(&mut row[qw..qw + kw], &gk, eps, nkv).expect("cpu k norm");
            }
            let mut r = Vec::new();
            for v in [2, plant as usize, n, nh, nkv, hd] {
                put_i(&mut r, v);
            }
            put_f(&mut r, &[eps]);
            for v in [&x, &gq, &gk] {
                put_f(&mut r, v);
            }
            out.push(Case {
                label: format!("q/k norms n {n} heads {nh}+{nkv} x {hd} plant {plant}"),
                record: r,
                want,
                must_match: !plant,
            });
        }
    }
    out
}

#[test]
fn llama_extra_kernels_compiled_for_the_host_give_the_cpu_bits() {
    let Some(cxx) = crate::host_cxx::compiler() else {
        return;
    };
    let (dir, exe) = crate::host_cxx::build(&cxx, "llama-extra", &host_source());
    let cases = cases(&mut Rng::new(0xE7A));
    let data: Vec<u8> = cases.iter().flat_map(|c| c.record.clone()).collect();
    let out = crate::host_cxx::run(&dir, &exe, "cases", &data);
    let _ = std::fs::remove_dir_all(&dir);
    let bits: Vec<u32> = out
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let total: usize = cases.iter().map(|c| c.want.len()).sum();
    assert_eq!(bits.len(), total, "output length");
    let mut at = 0;
    let mut failures = Vec::new();
    for c in &cases {
        let got = &bits[at..at + c.want.len()];
        at += c.want.len();
        let bad = got
            .iter()
            .zip(&c.want)
            .filter(|(g, w)| **g != w.to_bits())
            .count();
        if c.must_match && bad != 0 {
            failures.push(format!("{}: {bad} of {} differ", c.label, c.want.len()));
        }
        if !c.must_match && bad == 0 {
            failures.push(format!("{}: the planted control went uncaught", c.label));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
