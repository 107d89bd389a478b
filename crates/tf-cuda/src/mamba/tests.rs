//! Host tests of the Mamba wrappers: shapes against the CPU's parameters, the state layout,
//! and the kernels' signatures and register limits against what the wrappers push and check.

use super::*;
use crate::compile::{compile_to_ptx, nvrtc_present, program_source};

fn shape(heads: usize, head_dim: usize, groups: usize, state: usize, kernel: usize) -> MambaShape {
    MambaShape {
        heads,
        head_dim,
        groups,
        state,
        kernel,
    }
}

#[test]
fn shape_sizes_match_the_cpu_params() {
    for sh in [
        shape(8, 16, 2, 16, 4),
        shape(6, 5, 3, 7, 2),
        shape(2, 4, 1, 16, 1),
    ] {
        let cd = sh.conv_dim();
        let (w, z) = (vec![0.5f32; cd * sh.kernel], vec![0f32; sh.heads]);
        let p = MambaParams {
            n_heads: sh.heads,
            head_dim: sh.head_dim,
            n_groups: sh.groups,
            state_size: sh.state,
            conv_kernel: sh.kernel,
            conv_weight: &w,
            conv_bias: None,
            a: &z,
            d: &z,
            dt_bias: &z,
            dt_limit: (0.0, f32::INFINITY),
        };
        p.validate().unwrap();
        assert_eq!(MambaShape::of(&p), sh);
        assert_eq!(
            (sh.inner(), cd, sh.conv_state_len(), sh.ssm_state_len()),
            (
                p.inner(),
                p.conv_dim(),
                p.conv_state_len(),
                p.ssm_state_len()
            )
        );
        assert_eq!(sh.proj_width(), p.inner() + p.conv_dim() + p.n_heads);
    }
}

#[test]
fn layers_are_packed_one_after_another_and_bad_shapes_refused() {
    let (a, b) = (shape(8, 16, 2, 16, 4), shape(2, 4, 1, 16, 1));
    let (layers, c, s) = state_layout(&[a, b, a]).unwrap();
    let (ca, sa, sb) = (a.conv_state_len(), a.ssm_state_len(), b.ssm_state_len());
    assert_eq!(layers, vec![(0, 0, a), (ca, sa, b), (ca, sa + sb, a)]);
    assert_eq!((c, s), (2 * ca, 2 * sa + sb));
    assert!(
        state_layout(&[shape(4, 4, 3, 4, 2)]).is_err(),
        "3 groups over 4 heads"
    );
    assert!(state_layout(&[shape(4, 4, 2, 0, 2)]).is_err(), "state 0");
    assert!(
        state_layout(&[shape(4, 4, 2, MAX_STATE + 1, 2)]).is_err(),
        "state too big"
    );
    assert!(state_layout(&[shape(4, 4, 2, MAX_STATE, MAX_KERNEL + 1)]).is_err());
    state_layout(&[shape(4, 4, 2, MAX_STATE, MAX_KERNEL)]).unwrap();
}

#[test]
fn kernels_take_the_arguments_the_wrappers_push() {
    if !nvrtc_present() {
        eprintln!("skipped: libnvrtc not found");
        return;
    }
    let ptx = compile_to_ptx("tensorfold.cu", &program_source(), "compute_90").unwrap();
    let counts: std::collections::HashMap<String, usize> =
        crate::launch::ptx_param_counts(&ptx).into_iter().collect();
    for (name, n) in [
        ("tf_mamba_conv", 16),
        ("tf_plant_mamba_conv_reversed", 16),
        ("tf_mamba_ssm", 22),
        ("tf_plant_mamba_ssm_unclamped", 22),
        ("tf_plant_mamba_ssm_stale", 22),
        ("tf_mamba_gated_norm", 8),
        ("tf_mamba_gated_norm_split", 10),
        (PLANT_GATED_NORM_SHORT, 8),
        ("tf_nh_relu2", 3),
        ("tf_nh_add_bias", 4),
    ] {
        assert_eq!(counts.get(name), Some(&n), "{name}");
    }
    assert_eq!(KERNEL_NAMES.len(), 10);
    // The register limits the host checks are the kernels' own.
    let src = include_str!("../../kernels/mamba.cu");
    assert!(src.contains(&format!("#define MAMBA_MAX_STATE {MAX_STATE}\n")));
    assert!(src.contains(&format!("#define MAMBA_MAX_KERNEL {MAX_KERNEL}\n")));
}

/// Reads (n, width, groups; eps; y, z, gain), z's rows `width` apart; writes the split gated
/// norm's out, parts and sums, then the plain gated norm's out and tf_mma_split's parts and
/// sums of it.
const GATED_SPLIT_MAIN: &str = r#"
static std::vector<float> vf(FILE* f, size_t n) { std::vector<float> v(n); if (std::fread(v.data(), 4, n, f) != n) std::exit(3); return v; }
int main(int argc, char** argv) {
    FILE *fi, *fo;
    if (!tf_open_io(argc, argv, &fi, &fo)) return 2;
    int h[3];
    float eps;
    if (std::fread(h, 4, 3, fi) != 3 || std::fread(&eps, 4, 1, fi) != 1) return 3;
    const int n = h[0], w = h[1], groups = h[2];
    const size_t len = (size_t)n * w;
    auto y = vf(fi, len); auto z = vf(fi, len); auto g = vf(fi, w);
    std::vector<float> oa(len), ob(len), sa(len / 64), sb(len / 64);
    std::vector<uint4> pa(len / 4), pb(len / 4);
    const D3 rows{(unsigned)n, (unsigned)groups, 1};
    tf_launch(rows, 128, 4 * (size_t)(w / groups), [&] {
        tf_mamba_gated_norm_split(y.data(), z.data(), w, g.data(), eps, w, groups, oa.data(), pa.data(), sa.data());
    });
    tf_launch(rows, 128, 0, [&] { tf_mamba_gated_norm(y.data(), z.data(), w, g.data(), eps, w, groups, ob.data()); });
    const D3 grid{(unsigned)((w / 64 + 3) / 4), (unsigned)((n + 7) / 8), 1};
    tf_launch(grid, 128, 0, [&] { tf_mma_split(ob.data(), pb.data(), sb.data(), n, w); });
    std::fwrite(oa.data(), 4, len, fo);
    std::fwrite(pa.data(), 4, len, fo); std::fwrite(sa.data(), 4, len / 64, fo);
    std::fwrite(ob.data(), 4, len, fo);
    std::fwrite(pb.data(), 4, len, fo); std::fwrite(sb.data(), 4, len / 64, fo);
    std::fclose(fo);
    return 0;
}
"#;

/// The split gated norm (kernels/mamba_split.cu) gives the gated norm's bits and the split
/// tf_mma_split makes of them, bit for bit; a planted one (every block splitting into its row's
/// first groups) is told apart. Skipped, with a message, without a C++ compiler.
#[test]
fn split_gated_norm_gives_the_gated_norms_bits_and_their_split() {
    use crate::host_cxx;
    let Some(cxx) = host_cxx::compiler() else {
        return;
    };
    let kernel = include_str!("../../kernels/mamba_split.cu");
    let source = |k: &str| {
        format!(
            "{}\n{}\n{}\n{}\n{k}\n{GATED_SPLIT_MAIN}",
            host_cxx::SIMT_PRELUDE,
            host_cxx::common(),
            include_str!("../../kernels/mma.cu"),
            include_str!("../../kernels/mamba.cu"),
        )
    };
    let planted = kernel.replace("blockIdx.y * each + G,", "G,");
    assert_ne!(planted, kernel, "mamba_split.cu lost its group index");
    let mut rng = tf_kernels::contract::Rng::new(0x3a3a_0007);
    // 4 groups of 1024 (held by 128 threads, Bolt's shape), 2 of 1152 (the chunked sum).
    let cases = [(2usize, 4096usize, 4usize), (1, 2304, 2)];
    for (name, src, want_equal) in [
        ("gated_split", kernel, true),
        ("gated_split_plant", &planted, false),
    ] {
        let (dir, exe) = host_cxx::build(&cxx, name, &source(src));
        for &(n, w, groups) in &cases {
            let (y, z) = (rng.vec_normal(n * w, 1.0), rng.vec_normal(n * w, 2.0));
            let g = rng.vec_uniform(w, 0.5, 1.5);
            let mut input = Vec::new();
            for v in [n as i32, w as i32, groups as i32] {
                input.extend(v.to_le_bytes());
            }
            input.extend(1e-5f32.to_le_bytes());
            for v in y.iter().chain(&z).chain(&g) {
                input.extend(v.to_le_bytes());
            }
            let label = format!("n{n}w{w}g{groups}");
            let got = host_cxx::floats(&host_cxx::run(&dir, &exe, &label, &input));
            let one = 2 * n * w + n * w / 64;
            assert_eq!(got.len(), 2 * one, "{label}");
            let (split, plain) = got.split_at(one);
            let same = host_cxx::differing(split, plain) == 0;
            assert_eq!(same, want_equal, "{name} {label}");
        }
    }
}
