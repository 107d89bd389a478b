//! kernels/mamba.cu compiled for the host with a C++ compiler (no GPU) and run under a small
//! SIMT emulation (one OS thread per CUDA thread, barriers for `__syncthreads` and the warp
//! shuffles): a round of rows of three slots (one starting at position 0 over a dirty state,
//! several rows per slot in order) must give the CPU `mamba_step`'s bits — outputs and final
//! states — and the gated norm, relu² and bias add the CPU's; each planted kernel (the gated
//! norm's too) must differ.
//! The double `exp` / `log1p` of the softplus are the host libm's here (on the GPU, CUDA's:
//! the one part this cannot check). Skipped, with a message, when no C++ compiler is found
//! (`$CXX`, else `c++`); `TF_CUDA_REQUIRE_CXX=1` makes that a failure.

use crate::host_cxx::{differing, extract, floats, run};
use tf_kernels::contract::Rng;
use tf_kernels::ops::{exp, mamba_step, relu2, rms_norm_gated, MambaParams, MambaState};

/// The launch these kernels' harness uses: no dynamic shared memory.
const LAUNCH: &str =
    "template <class F> static void tf_launch(D3 g, unsigned t, F f) { tf_launch(g, t, 0, f); }\n";

/// Reads the case, runs every kernel, writes the outputs (layout in [`run_case`]).
const MAIN: &str = r#"
typedef void (*SsmFn)(const float*, int, const float*, int, int, const float*, const float*,
                      const float*, float, float, float*, const int*, const int*, int, int, int,
                      int, int, int, int, int, float*);
static unsigned blocks(size_t items, unsigned per) { return (unsigned)((items + per - 1) / per); }
int main(int argc, char** argv) {
    if (argc < 3) return 2;
    FILE* fi = std::fopen(argv[1], "rb");
    if (!fi) return 2;
    TfIn in;
    if (!tf_read_all(fi, &in)) return 3;
    const int heads = in.i(), hd = in.i(), groups = in.i(), ns = in.i(), K = in.i();
    const int has_bias = in.i(), n = in.i(), n_slots = in.i();
    const float lo = in.f(), hi = in.f(), eps = in.f();
    const int inner = heads * hd, cd = inner + 2 * groups * ns, width = inner + cd + heads;
    const int conv_len = (K - 1) * cd, ssm_len = inner * ns;
    auto w = in.vf((size_t)cd * K); auto bias = in.vf(cd); auto a = in.vf(heads);
    auto d = in.vf(heads); auto dtb = in.vf(heads);
    auto slots = in.vi(n); auto pos = in.vi(n);
    auto proj = in.vf((size_t)n * width);
    auto conv0 = in.vf((size_t)n_slots * conv_len); auto ssm0 = in.vf((size_t)n_slots * ssm_len);
    auto gain = in.vf(inner); auto rbias = in.vf(width);
    FILE* fo = std::fopen(argv[2], "wb");
    if (!fo) return 2;
    auto put = [&](const std::vector<float>& v) { std::fwrite(v.data(), 4, v.size(), fo); };
    const char* variants[4][2] = {{"conv", "ssm"}, {"conv_rev", "ssm"}, {"conv", "unclamped"}, {"conv", "stale"}};
    std::vector<float> y0;
    for (auto& var : variants) {
        auto conv = conv0; auto ssm = ssm0;
        std::vector<float> xbc((size_t)n * cd), y((size_t)n * inner);
        const bool rev = std::strcmp(var[0], "conv_rev") == 0;
        tf_launch(D3{blocks(cd, 128), 1, 1}, 128, [&] {
            if (rev) tf_plant_mamba_conv_reversed(proj.data(), width, inner, w.data(), bias.data(), has_bias, conv.data(), slots.data(), pos.data(), n_slots, conv_len, 0, n, cd, K, xbc.data());
            else tf_mamba_conv(proj.data(), width, inner, w.data(), bias.data(), has_bias, conv.data(), slots.data(), pos.data(), n_slots, conv_len, 0, n, cd, K, xbc.data());
        });
        tf_launch(D3{blocks((size_t)inner * 16, 128), 1, 1}, 128, [&] {
            auto args = [&](SsmFn kern) { kern(xbc.data(), cd, proj.data(), width, inner + cd, a.data(), d.data(), dtb.data(), lo, hi, ssm.data(), slots.data(), pos.data(), n_slots, ssm_len, 0, n, heads, hd, groups, ns, y.data()); };
            if (std::strcmp(var[1], "unclamped") == 0) args(static_cast<SsmFn>(tf_plant_mamba_ssm_unclamped));
            else if (std::strcmp(var[1], "stale") == 0) args(static_cast<SsmFn>(tf_plant_mamba_ssm_stale));
            else args(static_cast<SsmFn>(tf_mamba_ssm));
        });
        put(y); put(conv); put(ssm);
        if (y0.empty()) y0 = y;
    }
    std::vector<float> yn((size_t)n * inner);
    tf_launch(D3{(unsigned)n, (unsigned)groups, 1}, GATED_NORM_THREADS, [&] {
        tf_mamba_gated_norm(y0.data(), proj.data(), width, gain.data(), eps, inner, groups, yn.data());
    });
    put(yn);
    tf_launch(D3{(unsigned)n, (unsigned)groups, 1}, GATED_NORM_THREADS, [&] {
        tf_plant_mamba_gated_norm_short(y0.data(), proj.data(), width, gain.data(), eps, inner, groups, yn.data());
    });
    put(yn);
    const int len = n * width;
    std::vector<float> r2(len), pb = proj;
    tf_launch(D3{blocks(len, 256), 1, 1}, 256, [&] { tf_nh_relu2(proj.data(), r2.data(), len); });
    tf_launch(D3{blocks(len, 256), 1, 1}, 256, [&] { tf_nh_add_bias(pb.data(), rbias.data(), width, len); });
    put(r2); put(pb);
    std::fclose(fo);
    return 0;
}
"#;

/// One shape's case: constants, a round of rows over `N_SLOTS` slots, the pools before it.
struct Case {
    heads: usize,
    hd: usize,
    groups: usize,
    ns: usize,
    k: usize,
    bias: Option<Vec<f32>>,
    dt_limit: (f32, f32),
    w: Vec<f32>,
    a: Vec<f32>,
    d: Vec<f32>,
    dtb: Vec<f32>,
    /// (slot, pos) per row.
    rows: Vec<(usize, usize)>,
    proj: Vec<f32>,
    conv0: Vec<f32>,
    ssm0: Vec<f32>,
    gain: Vec<f32>,
    rbias: Vec<f32>,
}

const N_SLOTS: usize = 3;
const EPS: f32 = 1e-5;

impl Case {
    #[allow(clippy::too_many_arguments)]
    fn new(
        seed: u64,
        heads: usize,
        hd: usize,
        groups: usize,
        ns: usize,
        k: usize,
        bias: bool,
        dt_limit: (f32, f32),
    ) -> Case {
        let mut r = Rng::new(seed);
        let inner = heads * hd;
        let cd = inner + 2 * groups * ns;
        let width = inner + cd + heads;
        // Slot 0 restarts at position 0 over a dirty state and takes four rows; slot 1 continues
        // at 5 with three; slot 2 continues at 2 with one; interleaved.
        let rows = vec![
            (1, 5),
            (0, 0),
            (2, 2),
            (0, 1),
            (1, 6),
            (0, 2),
            (0, 3),
            (1, 7),
        ];
        let mut proj = r.vec_normal(rows.len() * width, 1.0);
        // Some dt values far out, so the clamp bites (both ends).
        for (i, row) in proj.chunks_exact_mut(width).enumerate() {
            row[inner + cd + i % heads] = if i % 2 == 0 { 6.0 } else { -9.0 };
        }
        Case {
            heads,
            hd,
            groups,
            ns,
            k,
            bias: bias.then(|| r.vec_normal(cd, 0.1)),
            dt_limit,
            w: r.vec_normal(cd * k, 0.5),
            a: (0..heads).map(|_| -exp(r.uniform(0.0, 2.0))).collect(),
            d: (0..heads).map(|_| 1.0 + 0.3 * r.normal()).collect(),
            dtb: (0..heads).map(|_| -1.0 + 0.7 * r.normal()).collect(),
            rows,
            proj,
            conv0: r.vec_normal(N_SLOTS * (k - 1) * cd, 2.0),
            ssm0: r.vec_normal(N_SLOTS * inner * ns, 1.0),
            gain: r.vec_uniform(inner, 0.5, 1.5),
            rbias: r.vec_normal(width, 1.0),
        }
    }

    fn params(&self) -> MambaParams<'_> {
        MambaParams {
            n_heads: self.heads,
            head_dim: self.hd,
            n_groups: self.groups,
            state_size: self.ns,
            conv_kernel: self.k,
            conv_weight: &self.w,
            conv_bias: self.bias.as_deref(),
            a: &self.a,
            d: &self.d,
            dt_bias: &self.dtb,
            dt_limit: self.dt_limit,
        }
    }

    fn input(&self) -> Vec<u8> {
        let mut b = Vec::new();
        let cd = self.heads * self.hd + 2 * self.groups * self.ns;
        let ints = [
            self.heads,
            self.hd,
            self.groups,
            self.ns,
            self.k,
            self.bias.is_some() as usize,
            self.rows.len(),
            N_SLOTS,
        ];
        ints.iter()
            .for_each(|&v| b.extend_from_slice(&(v as i32).to_le_bytes()));
        for v in [self.dt_limit.0, self.dt_limit.1, EPS] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        let zeros = vec![0f32; cd];
        let fl = [
            &self.w[..],
            self.bias.as_deref().unwrap_or(&zeros),
            &self.a,
            &self.d,
            &self.dtb,
        ];
        for s in fl {
            s.iter().for_each(|v| b.extend_from_slice(&v.to_le_bytes()));
        }
        for sel in [0, 1] {
            for r in &self.rows {
                let v = if sel == 0 { r.0 } else { r.1 } as i32;
                b.extend_from_slice(&v.to_le_bytes());
            }
        }
        for s in [&self.proj, &self.conv0, &self.ssm0, &self.gain, &self.rbias] {
            s.iter().for_each(|v| b.extend_from_slice(&v.to_le_bytes()));
        }
        b
    }

    /// The CPU: y of every row, then each slot's final conv and SSM state (as the pools hold
    /// them), the gated norm of y with z from the projection, relu² and the bias add.
    fn cpu(&self) -> Vec<Vec<f32>> {
        let p = self.params();
        let (inner, cd) = (p.inner(), p.conv_dim());
        let width = inner + cd + self.heads;
        let (cl, sl) = (p.conv_state_len(), p.ssm_state_len());
        let mut states: Vec<MambaState> = (0..N_SLOTS)
            .map(|s| MambaState {
                conv: self.conv0[s * cl..(s + 1) * cl].to_vec(),
                ssm: self.ssm0[s * sl..(s + 1) * sl].to_vec(),
            })
            .collect();
        let mut y = vec![0f32; self.rows.len() * inner];
        let mut conv = vec![0f32; cd];
        for (i, &(slot, pos)) in self.rows.iter().enumerate() {
            if pos == 0 {
                states[slot].clear();
            }
            let pr = &self.proj[i * width..(i + 1) * width];
            mamba_step(
                &p,
                &mut states[slot],
                &pr[inner..inner + cd],
                &pr[inner + cd..],
                &mut conv,
                &mut y[i * inner..(i + 1) * inner],
            )
            .expect("cpu mamba_step");
        }
        let conv_pool: Vec<f32> = states.iter().flat_map(|s| s.conv.clone()).collect();
        let ssm_pool: Vec<f32> = states.iter().flat_map(|s| s.ssm.clone()).collect();
        let z: Vec<f32> = self
            .proj
            .chunks_exact(width)
            .flat_map(|r| r[..inner].to_vec())
            .collect();
        let mut yn = vec![0f32; y.len()];
        let n = self.rows.len();
        rms_norm_gated(&y, &z, &self.gain, EPS, self.groups, n, &mut yn).expect("cpu norm");
        let mut r2 = vec![0f32; self.proj.len()];
        relu2(&self.proj, &mut r2).expect("cpu relu2");
        let mut pb = self.proj.clone();
        for row in pb.chunks_exact_mut(width) {
            for (v, b) in row.iter_mut().zip(&self.rbias) {
                *v += b;
            }
        }
        vec![y, conv_pool, ssm_pool, yn, r2, pb]
    }
}

#[test]
fn mamba_kernels_emulated_on_the_host_give_the_cpu_bits() {
    let Some(cxx) = crate::host_cxx::compiler() else {
        return;
    };
    let common = include_str!("../../../kernels/common.cuh");
    let mut source = format!("{}{LAUNCH}", crate::host_cxx::SIMT_PRELUDE);
    for head in [
        "__device__ __forceinline__ float tf_bits(",
        "__device__ __forceinline__ float tf_exp(",
        "__device__ __forceinline__ float tf_silu(",
        "__device__ __forceinline__ float tf_fold16_sum(",
        "__device__ __forceinline__ float tf_inv_rms(",
        "__device__ __forceinline__ void tf_mark(const char*)",
        "#define TF_SQ_CHUNK",
        "template <class Stage>\n__device__ __forceinline__ float tf_staged_sumsq16(",
        "template <class V>\n__device__ __forceinline__ float tf_block_sumsq16(",
        "#define TF_HOLD",
        "__device__ __forceinline__ float tf_held_sumsq16(",
    ] {
        if head.starts_with("#define") {
            let line = common[common.find(head).expect("a #define of common.cuh")..]
                .lines()
                .next()
                .unwrap_or_default();
            source.push_str(line);
        } else {
            source.push_str(&extract(common, head));
        }
        source.push('\n');
    }
    source.push_str(include_str!("../../../kernels/mamba.cu"));
    source.push_str(&format!(
        "#define GATED_NORM_THREADS {}\n",
        crate::mamba::GATED_NORM_THREADS
    ));
    source.push_str(MAIN);
    let (dir, exe) = crate::host_cxx::build(&cxx, "mamba", &source);
    let inf = f32::INFINITY;
    let cases = [
        Case::new(1, 4, 16, 1, 8, 3, false, (0.05, 0.8)),
        Case::new(2, 6, 5, 3, 7, 2, true, (0.001, 100.0)),
        Case::new(3, 8, 16, 2, 16, 4, true, (0.0, inf)),
        Case::new(4, 2, 4, 1, 40, 1, false, (0.05, 0.8)),
        // The scan's two lane widths: 8 states a lane up to 128, 16 past it.
        Case::new(5, 2, 4, 1, 128, 4, true, (0.05, 0.8)),
        Case::new(6, 2, 4, 2, 150, 4, false, (0.0, inf)),
    ];
    for (ci, c) in cases.iter().enumerate() {
        let got = floats(&run(&dir, &exe, &format!("case{ci}"), &c.input()));
        let want = c.cpu();
        let p = c.params();
        let (n, inner) = (c.rows.len(), p.inner());
        let (ny, nc, nsm) = (
            n * inner,
            N_SLOTS * p.conv_state_len(),
            N_SLOTS * p.ssm_state_len(),
        );
        let per_variant = ny + nc + nsm;
        assert_eq!(
            got.len(),
            4 * per_variant + 2 * ny + 2 * c.proj.len(),
            "case {ci}"
        );
        let (prod, rest) = got.split_at(per_variant);
        let step_want = [&want[0][..], &want[1][..], &want[2][..]].concat();
        let bad = differing(prod, &step_want);
        assert_eq!(
            bad, 0,
            "case {ci}: {bad} of {per_variant} step values differ"
        );
        // Planted kernels: reversed taps (kernel > 1), no clamp (finite clamp), stale output.
        let (planted, tail) = rest.split_at(3 * per_variant);
        for (vi, what) in ["reversed conv taps", "no dt clamp", "stale output"]
            .iter()
            .enumerate()
        {
            let applies = match vi {
                0 => c.k > 1,
                1 => c.dt_limit != (0.0, inf),
                _ => true,
            };
            let v = &planted[vi * per_variant..(vi + 1) * per_variant];
            let d = differing(&v[..ny], &want[0]);
            assert!(
                !applies || d > 0,
                "case {ci}: planted {what} gave the CPU's y"
            );
        }
        let (yn, tail) = tail.split_at(ny);
        let bad = differing(yn, &want[3]);
        assert_eq!(bad, 0, "case {ci}: gated norm, {bad} of {ny} differ");
        let (short, tail) = tail.split_at(ny);
        let d = differing(short, &want[3]);
        assert!(
            d > 0,
            "case {ci}: the planted short gated norm gave the CPU's bits"
        );
        let (r2, pb) = tail.split_at(c.proj.len());
        assert_eq!(differing(r2, &want[4]), 0, "case {ci}: relu2");
        assert_eq!(differing(pb, &want[5]), 0, "case {ci}: bias add");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
