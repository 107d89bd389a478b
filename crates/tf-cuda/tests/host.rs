//! Host-side behaviour that needs no GPU: refusals on a machine without a driver, format
//! bookkeeping, and the kernel table.

use tf_cuda::device::{all_kernel_names, driver_present, fused_kernel_name};
use tf_cuda::{CudaError, Gpu, GpuFormat};
use tf_formats::gguf::GgmlType;

#[test]
fn no_driver_is_a_named_refusal_not_a_panic() {
    if driver_present() {
        eprintln!("skipped: this machine has a CUDA driver");
        return;
    }
    match Gpu::open(0) {
        Err(CudaError::NoDriver) => {}
        Err(other) => panic!("expected NoDriver, got {other}"),
        Ok(_) => panic!("opened a GPU without a driver"),
    }
    let msg = CudaError::NoDriver.to_string();
    assert!(msg.contains("--backend cpu"), "{msg}");
}

#[test]
fn row_bytes_match_the_gguf_block_sizes() {
    for (f, ty) in [
        (GpuFormat::Q4_0, GgmlType::Q4_0),
        (GpuFormat::Q4_1, GgmlType::Q4_1),
        (GpuFormat::Q8_0, GgmlType::Q8_0),
    ] {
        for cols in [32usize, 576, 1536] {
            assert_eq!(
                f.row_bytes(cols),
                cols / ty.block_size() * ty.type_size(),
                "{f:?} {cols}"
            );
        }
    }
    assert_eq!(GpuFormat::Bf16.row_bytes(577), 1154);
    assert_eq!(GpuFormat::F32.row_bytes(3), 12);
}

#[test]
fn every_format_has_its_kernels_in_the_table() {
    let names = all_kernel_names();
    for f in [
        GpuFormat::F32,
        GpuFormat::F16,
        GpuFormat::Bf16,
        GpuFormat::Q4_0,
        GpuFormat::Q4_1,
        GpuFormat::Q8_0,
    ] {
        assert!(names.iter().any(|n| n == f.matmul_kernel()), "{f:?} matmul");
        assert!(names.iter().any(|n| n == f.embed_kernel()), "{f:?} embed");
        for x in ["none", "norm", "silu"] {
            for e in ["store", "add"] {
                let k = fused_kernel_name(f.kernel_tag(), x, e);
                assert!(names.contains(&k), "{k}");
            }
        }
    }
    // Names are unique (a duplicate would hide a missing kernel).
    let mut sorted = names.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), names.len());
}
