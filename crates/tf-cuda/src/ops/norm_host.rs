//! kernels/ops.cu's RMSNorm compiled for the host with a C++ compiler (no GPU) and run under the
//! SIMT emulation (`host_cxx`): `tf_add_rms_norm` (the residual add and the norm in one launch)
//! must give the bits of `tf_add_inplace` then `tf_rms_norm`, and those the CPU's `add_inplace`
//! then `rms_norm`, the written residual included, and `tf_add2_rms_norm` those of adding s into
//! o first; the planted kernel must differ. Skipped, with
//! a message, when no C++ compiler runs (`$CXX`, else `c++`); `TF_CUDA_REQUIRE_CXX=1` makes that
//! a failure.

use crate::host_cxx::{differing, floats, run};
use tf_kernels::contract::Rng;
use tf_kernels::ops::{add_inplace, rms_norm};

/// Reads a case (i32 n, width, mode; f32 eps; x, o, s, gain) from argv[1] and writes to argv[2]
/// the fused kernel's x and y, then tf_add_inplace + tf_rms_norm's x and y. Mode 0: x + o; 1:
/// the planted x + o; 2: x + (o + s).
const MAIN: &str = r#"
static std::vector<float> vf(FILE* f, size_t n) { std::vector<float> v(n); if (std::fread(v.data(), 4, n, f) != n) std::exit(3); return v; }
int main(int argc, char** argv) {
    FILE *fi, *fo;
    if (!tf_open_io(argc, argv, &fi, &fo)) return 2;
    int h[3];
    float eps;
    if (std::fread(h, 4, 3, fi) != 3 || std::fread(&eps, 4, 1, fi) != 1) return 3;
    const int n = h[0], w = h[1], mode = h[2];
    const size_t len = (size_t)n * w;
    auto x = vf(fi, len); auto o = vf(fi, len); auto s = vf(fi, len); auto g = vf(fi, w);
    auto xf = x, xs = x;
    std::vector<float> yf(len), ys(len);
    tf_launch(D3{(unsigned)n, 1, 1}, 128, 0, [&] {
        if (mode == 1) tf_plant_add_rms_norm_short(xf.data(), o.data(), g.data(), yf.data(), w, eps);
        else if (mode == 2) tf_add2_rms_norm(xf.data(), o.data(), s.data(), g.data(), yf.data(), w, eps);
        else tf_add_rms_norm(xf.data(), o.data(), g.data(), yf.data(), w, eps);
    });
    const D3 grid{(unsigned)((len + 255) / 256), 1, 1};
    if (mode == 2) tf_launch(grid, 256, 0, [&] { tf_add_inplace(o.data(), s.data(), (int)len); });
    tf_launch(grid, 256, 0, [&] { tf_add_inplace(xs.data(), o.data(), (int)len); });
    tf_launch(D3{(unsigned)n, 1, 1}, 128, 0, [&] { tf_rms_norm(xs.data(), g.data(), ys.data(), w, eps); });
    for (auto* v : {&xf, &yf, &xs, &ys}) std::fwrite(v->data(), 4, v->size(), fo);
    std::fclose(fo);
    return 0;
}
"#;

#[test]
fn add_rms_norm_emulated_on_the_host_gives_the_add_then_the_norm() {
    let Some(cxx) = crate::host_cxx::compiler() else {
        return;
    };
    let source = format!(
        "{}\n{}\n{}\n{MAIN}",
        crate::host_cxx::SIMT_PRELUDE,
        crate::host_cxx::common(),
        include_str!("../../kernels/ops.cu")
    );
    let (dir, exe) = crate::host_cxx::build(&cxx, "norm", &source);
    let mut rng = Rng::new(0x5eed);
    let eps = 1e-5f32;
    // 4100 spans three of tf_block_sumsq16's staging chunks (wider than the 128 threads hold:
    // the chunked path); 1024 is what they hold, 577 is odd (held, with idle slots).
    for (n, w) in [(3usize, 4100usize), (2, 1024), (5, 577), (1, 64)] {
        let (x, o) = (rng.vec_normal(n * w, 2.0), rng.vec_normal(n * w, 1.0));
        let s = rng.vec_normal(n * w, 1.0);
        let g = rng.vec_uniform(w, 0.5, 1.5);
        for mode in [0, 1, 2] {
            let plant = mode == 1;
            let mut cpu_o = o.clone();
            if mode == 2 {
                add_inplace(&mut cpu_o, &s).expect("cpu add");
            }
            let mut cpu_x = x.clone();
            add_inplace(&mut cpu_x, &cpu_o).expect("cpu add");
            let mut cpu_y = vec![0f32; n * w];
            rms_norm(&cpu_x, &g, eps, n, &mut cpu_y).expect("cpu rms_norm");
            let mut input = Vec::new();
            for v in [n as i32, w as i32, mode] {
                input.extend(v.to_le_bytes());
            }
            input.extend(eps.to_le_bytes());
            for v in x.iter().chain(&o).chain(&s).chain(&g) {
                input.extend(v.to_le_bytes());
            }
            let label = format!("n{n}w{w}m{mode}");
            let got = floats(&run(&dir, &exe, &label, &input));
            assert_eq!(got.len(), 4 * n * w, "{label}");
            let part = |i: usize| &got[i * n * w..(i + 1) * n * w];
            let (fused_x, fused_y, seq_x, seq_y) = (part(0), part(1), part(2), part(3));
            assert_eq!(
                differing(seq_x, &cpu_x),
                0,
                "{label}: add_inplace != the CPU's"
            );
            assert_eq!(
                differing(seq_y, &cpu_y),
                0,
                "{label}: rms_norm != the CPU's"
            );
            assert_eq!(differing(fused_x, &cpu_x), 0, "{label}: the fused residual");
            let bad = differing(fused_y, &cpu_y);
            match plant {
                false => assert_eq!(bad, 0, "{label}: the fused norm differs in {bad} values"),
                true => assert!(bad > 0, "{label}: the planted short sum was not caught"),
            }
        }
    }
}
