//! Compiles every kernel source to PTX for compute_90 with NVRTC (no GPU needed). Skipped, with a
//! message, when libnvrtc cannot be loaded; CI installs `nvidia-cuda-nvrtc==13.0.88` and puts
//! `nvidia/cu13/lib` on LD_LIBRARY_PATH so compile errors fail the build there.

use tf_cuda::compile::{
    cache_key, compile_to_ptx, nvrtc_present, nvrtc_version, program_cubin, program_source,
    program_source_with,
};
use tf_cuda::device::all_kernel_names;
use tf_cuda::CudaError;

fn nvrtc_or_skip() -> bool {
    if nvrtc_present() {
        return true;
    }
    if std::env::var_os("TF_CUDA_REQUIRE_NVRTC").is_some() {
        panic!("TF_CUDA_REQUIRE_NVRTC is set but libnvrtc cannot be loaded");
    }
    eprintln!("skipped: libnvrtc not found (set LD_LIBRARY_PATH to nvidia/cu13/lib)");
    false
}

/// The served program's PTX for compute_90, compiled once for the tests that read it.
fn program_ptx() -> &'static str {
    static PTX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PTX.get_or_init(|| {
        compile_to_ptx("tensorfold.cu", &program_source(), "compute_90")
            .unwrap_or_else(|e| panic!("{e}"))
    })
}

#[test]
fn every_kernel_compiles_for_compute_90() {
    if !nvrtc_or_skip() {
        return;
    }
    let ptx = program_ptx();
    let names = all_kernel_names();
    assert!(names.len() > 50, "{} kernel names", names.len());
    for name in &names {
        assert!(
            ptx.contains(&format!(".entry {name}(")),
            "kernel {name} missing from the PTX"
        );
    }
    // The launch wrappers check their argument counts against these signatures.
    let counts: std::collections::HashMap<String, usize> =
        tf_cuda::launch::ptx_param_counts(ptx).into_iter().collect();
    assert_eq!(counts.get("tf_attend"), Some(&16));
    assert_eq!(counts.get("tf_mmf_q4_1_norm_store"), Some(&9));
    assert_eq!(counts.get("tf_rope_append"), Some(&14));
    assert_eq!(counts.get("tf_matmul_q8_0"), Some(&6));
    // --fmad=false: every fused multiply-add in the PTX is one the source wrote as fmaf.
    assert!(
        ptx.contains("fma.rn.f32"),
        "expected explicit fmaf in the PTX"
    );
    assert!(ptx.contains(".target sm_90"), "PTX not for sm_90");
    // Every kernel waits for the kernels before it (a round's graph edges are programmatic).
    let lacking = tf_cuda::launch::entries_lacking(ptx, FOLLOW);
    assert!(lacking.is_empty(), "kernels without tf_follow: {lacking:?}");
}

const FOLLOW: &str = "griddepcontrol.wait";

/// In the served program every kernel leads right after its wait (`TF_LEAD_ALL`).
#[test]
fn every_kernel_leads_in_the_served_program() {
    if !nvrtc_or_skip() {
        return;
    }
    const LEAD: &str = "griddepcontrol.launch_dependents";
    let lacking = tf_cuda::launch::entries_lacking(program_ptx(), LEAD);
    assert!(lacking.is_empty(), "kernels without tf_lead: {lacking:?}");
    // Control: without the define the products do not lead.
    let ptx = compile_to_ptx("no_lead.cu", &program_source_with(false), "compute_90")
        .unwrap_or_else(|e| panic!("{e}"));
    let lacking = tf_cuda::launch::entries_lacking(&ptx, LEAD);
    assert!(
        lacking.iter().any(|k| k == "tf_mma_mlx4_r1_split_x4_b16"),
        "{lacking:?}"
    );
}

#[test]
fn a_kernel_without_tf_follow_is_named() {
    if !nvrtc_or_skip() {
        return;
    }
    let source = format!(
        "{}\nextern \"C\" __global__ void tf_a(float* x) {{ tf_follow(); x[0] = 1.f; }}\n\
         extern \"C\" __global__ void tf_planted(float* x) {{ x[0] = 2.f; }}\n",
        include_str!("../kernels/common.cuh")
    );
    let ptx = compile_to_ptx("follow.cu", &source, "compute_90").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        tf_cuda::launch::entries_lacking(&ptx, FOLLOW),
        ["tf_planted"]
    );
}

#[test]
fn a_broken_source_is_refused_with_its_log() {
    if !nvrtc_or_skip() {
        return;
    }
    let bad = format!(
        "{}\nextern \"C\" __global__ void broken(float* x) {{ x[0] = undefined_name; }}\n",
        tf_cuda::compile::COMMON
    );
    match compile_to_ptx("broken.cu", &bad, "compute_90") {
        Err(CudaError::Compile { log, .. }) => {
            assert!(log.contains("undefined_name"), "log: {log}")
        }
        other => panic!("a broken source compiled: {:?}", other.map(|p| p.len())),
    }
}

#[test]
fn cache_key_changes_with_source_arch_and_version() {
    let v = (13, 0);
    let a = cache_key("x", "compute_90", v);
    assert_eq!(a, cache_key("x", "compute_90", v));
    assert_ne!(a, cache_key("y", "compute_90", v));
    assert_ne!(a, cache_key("x", "compute_80", v));
    assert_ne!(a, cache_key("x", "compute_90", (13, 1)));
    if nvrtc_present() {
        let (major, _) = nvrtc_version().expect("version");
        assert!(major >= 11);
    }
}

#[test]
fn ptx_param_counts_reads_entry_signatures() {
    let ptx = ".visible .entry a(\n .param .u64 a_0,\n .param .u32 a_1\n)\n{ ret; }\n.visible .entry b()\n{ }\n";
    let c = tf_cuda::launch::ptx_param_counts(ptx);
    assert_eq!(c, vec![("a".to_string(), 2), ("b".to_string(), 0)]);
    // A control: a signature with one more parameter is counted differently.
    let more = ptx.replace("a_1\n", "a_1,\n .param .u32 a_2\n");
    assert_eq!(tf_cuda::launch::ptx_param_counts(&more)[0].1, 3);
}

/// The program's machine code is taken from the cache only under its own key and the device's
/// architecture: a file for another architecture, or for the program's PTX, is not.
#[test]
fn the_cached_cubin_is_the_programs_for_its_architecture() {
    if !nvrtc_or_skip() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("tf-cuda-cubin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ptx_of = |arch: &str| {
        let key = cache_key(&program_source(), arch, nvrtc_version().unwrap());
        dir.join(format!("{key}.ptx"))
    };
    let ptx = ptx_of("compute_90");
    assert_eq!(program_cubin(&ptx, "sm_90"), None);
    std::fs::write(ptx.with_extension("sm_80.cubin"), b"eighty").unwrap();
    std::fs::write(&ptx, b"ptx").unwrap();
    assert_eq!(program_cubin(&ptx, "sm_90"), None);
    std::fs::write(ptx.with_extension("sm_90.cubin"), b"ninety").unwrap();
    assert_eq!(
        program_cubin(&ptx, "sm_90").as_deref(),
        Some(&b"ninety"[..])
    );
    assert_eq!(program_cubin(&ptx_of("compute_89"), "sm_90"), None);
    std::fs::remove_dir_all(&dir).unwrap();
}
