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
        ("tf_mamba_ssm_wave", 22),
        ("tf_plant_mamba_ssm_unclamped", 22),
        ("tf_plant_mamba_ssm_stale", 22),
        ("tf_mamba_gated_norm", 8),
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
    assert!(src.contains(&format!("#define MAMBA_SSM_THREADS {SSM_THREADS} ")));
}
