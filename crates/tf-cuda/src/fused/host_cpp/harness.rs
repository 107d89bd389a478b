//! The host build of the staged, grouped and fused matmul kernels: CUDA stand-ins (threads,
//! barriers, shuffles, votes), the emulated launch, the case reader, and the program text.

use crate::device::{fused_kernel_name, mmg_kernel_name, FUSED_VARIANTS, MMG_FORMATS};
use crate::weights::GpuFormat;

/// Host stand-ins for the CUDA names the kernels use, and the emulated launch.
const PRELUDE: &str = crate::host_cxx::SIMT_PRELUDE;

/// Reads cases from argv[1], writes each case's outputs to argv[2]. A case: a kernel name
/// (u32 length + bytes), then i32 kind, threads per weight row, rows, cols, n, experts, x_stride, byte length,
/// offset; the weight bytes; x (n * x_stride floats; kind 2: experts + 1 offsets first); for
/// fused kinds the gain (cols floats), eps and the y it starts from (n * rows floats).
/// kind 4: a tf_slices one-row entry (n = 1, `tpr` row groups a warp); kind 0: plain matmul, 1: grouped expert matmul, 2: fused (name picks the variant), 3: the
/// fused kernels' many-row twins (tf_mmg_*, the same arguments, their own grid).
const MAIN: &str = r#"
typedef void (*MmFn)(const u8*, const float*, float*, int, int, int);
typedef void (*MoeFn)(const u8*, const float*, float*, const int*, int, int, int);
typedef void (*MmfFn)(const u8*, const float*, const float*, float, float*, int, int, int, int);
#define MM(name) {#name, name},
static std::map<std::string, MmFn> mm = { TF_HOST_MM };
static std::map<std::string, MoeFn> moe = { TF_HOST_MOE };
static std::map<std::string, MmfFn> mmf = { TF_HOST_MMF };
int main(int argc, char** argv) {
    FILE *fi, *fo;
    if (!tf_open_io(argc, argv, &fi, &fo)) return 2;
    TfIn in;
    if (!tf_read_all(fi, &in)) return 3;
    while (in.more()) {
        const std::string name = in.s();
        const int kind = in.i(), tpr = in.i(), rows = in.i(), cols = in.i(), n = in.i();
        const int experts = in.i(), xs = in.i(), len = in.i(), off = in.i();
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
        const unsigned blocks = (unsigned)((rows * tpr + 127) / 128);
        // 4 threads a row run the format's tf_mmq twin (as geometry_kernel names it).
        const std::string entry = tpr == 4 ? name + "_mmq" : name;
        if (kind == 4) {
            // A tf_slices one-row entry: (rows, cols, row groups a warp = tpr).
            auto it = mm.find(name);
            if (it == mm.end()) return 4;
            const int rj = name.find("bf16") != std::string::npos ? 2 : 4;  // tf_slice_one_rows
            const unsigned warps = (unsigned)(((rows + rj - 1) / rj + tpr - 1) / tpr);
            tf_launch(D3{(warps * 32 + 127) / 128, 1, 1}, 128, 4096 * (size_t)((cols + 1023) / 1024), [&] { it->second(W, x.data(), y.data(), rows, cols, tpr); });
        } else if (kind == 0) {
            auto it = mm.find(entry);
            if (it == mm.end()) return 4;
            // tf_slices: two x slabs (4 KiB) of up to MM_RT rows.
            const size_t smem = name.find("slices") != std::string::npos ? 8192 * (size_t)std::min(n, MM_RT) : 0;
            tf_launch(D3{blocks, 1, 1}, 128, smem, [&] { it->second(W, x.data(), y.data(), n, rows, cols); });
        } else if (kind == 1) {
            auto it = moe.find(entry);
            if (it == moe.end()) return 4;
            // As the launcher: a block row per possible non-empty group.
            const unsigned groups = (unsigned)std::max(1, std::min(experts, n));
            // tf_moe_slices: the larger of its two bodies' x copies.
            const size_t smem = name.find("slices") == std::string::npos ? 0
                : std::max(8192 * (size_t)std::min(n, MM_RT), 4096 * (size_t)((cols + 1023) / 1024));
            tf_launch(D3{blocks, groups, 1}, 128, smem, [&] { it->second(W, x.data(), y.data(), offs.data(), rows, cols, experts); });
        } else {
            auto it = mmf.find(name);
            if (it == mmf.end()) return 4;
            auto g = in.vf(cols);
            const float eps = in.f();
            y = in.vf((size_t)n * rows);
            const int smem = in.i();
            const bool swiglu = name.size() > 7 && name.compare(name.size() - 7, 7, "_swiglu") == 0;
            const D3 grid = kind == 2 ? D3{(unsigned)((rows + MMF_ROWS - 1) / MMF_ROWS), 1, 1}
                : D3{(unsigned)(swiglu ? (rows / 2 + MMG_J / 2 - 1) / (MMG_J / 2) : (rows + MMG_J - 1) / MMG_J),
                     (unsigned)((n + MMG_I - 1) / MMG_I), 1};
            tf_launch(grid, kind == 2 ? MMF_THREADS : MMG_THREADS, smem, [&] {
                it->second(W, x.data(), g.data(), eps, y.data(), n, rows, cols, xs);
            });
        }
        std::fwrite(y.data(), 4, y.size(), fo);
    }
    std::fclose(fo);
    return 0;
}
"#;

/// The kernels' dynamic shared memory, and its host stand-in.
const SMEM_DECL: &str = "extern __shared__ __align__(16) u8 tf_smem[];";
const SMEM_HOST: &str = "u8* tf_smem = tf_dyn_smem;";

/// Formats, their `FMT_*` ids and kernel tags.
pub(super) const FORMATS: [GpuFormat; 14] = GpuFormat::ALL;

/// The kernel sources for the host: common.cuh (its f16 conversion through the host's),
/// matmul.cu, slices.cu, fused.cu, quant.cu and moe.cu, then tables of the entries the harness calls.
pub(super) fn host_source() -> String {
    format!("{}{MAIN}", host_kernels())
}

/// [`host_source`] without the harness's `main`.
pub(crate) fn host_kernels() -> String {
    let common = crate::host_cxx::common();
    let fused = include_str!("../../../kernels/fused.cu").replace(SMEM_DECL, SMEM_HOST);
    assert!(
        fused.contains("tf_dyn_smem"),
        "fused.cu's dynamic shared memory moved"
    );
    // Of moe.cu only the grouped expert matmuls (the rest needs no stand-ins here).
    let moe_src = include_str!("../../../kernels/moe.cu");
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
        for (xf, ep) in FUSED_VARIANTS {
            mmf.push_str(&format!("MM({}) ", fused_kernel_name(tag, xf, ep)));
        }
    }
    for tag in MMG_FORMATS {
        for (xf, ep) in FUSED_VARIANTS {
            mmf.push_str(&format!("MM({}) ", mmg_kernel_name(tag, xf, ep)));
        }
    }
    mmf.push_str("MM(tf_plant_mmg_q4_1_none_store) ");
    for p in [
        "tf_plant_matmul_q4_1_rowvar",
        "tf_plant_matmul_mlx4_fma",
        "tf_plant_matmul_mlx4_nibbles",
        "tf_ref_matmul_q4_0",
        "tf_ref_matmul_mlx4",
    ] {
        mm.push_str(&format!("MM({p}) "));
    }
    for k in crate::slices::KERNEL_NAMES {
        mm.push_str(&format!("MM({k}) "));
    }
    moe.push_str("MM(tf_plant_moe_matmul_q4_1_rowvar) ");
    for k in crate::moe::KERNEL_NAMES
        .iter()
        .filter(|k| k.starts_with("tf_moe_slices"))
    {
        moe.push_str(&format!("MM({k}) "));
    }
    for k in crate::device::mmq_kernels() {
        let table = if k.contains("_moe_") {
            &mut moe
        } else {
            &mut mm
        };
        table.push_str(&format!("MM({k}_mmq) "));
    }
    // The old template (tf_matmul) as entries: the staged one must equal it.
    let refs = "#define TF_MATMUL_REF_ENTRY(NAME, FMT) extern \"C\" void NAME(const u8* W, \
                const float* x, float* y, int n, int rows, int cols) { \
                tf_matmul<FMT, 0>(W, x, y, n, rows, cols); }\n\
                TF_MATMUL_REF_ENTRY(tf_ref_matmul_q4_0, FMT_Q4_0)\n\
                TF_MATMUL_REF_ENTRY(tf_ref_matmul_mlx4, FMT_MLX4)\n";
    let slices = include_str!("../../../kernels/slices.cu").replace(SMEM_DECL, SMEM_HOST);
    assert!(
        slices.contains("tf_dyn_smem"),
        "slices.cu's dynamic shared memory moved"
    );
    format!(
        "{PRELUDE}{common}\n{}\n{slices}\n{fused}\n{}\n{}\n{}\n{refs}\n#define TF_HOST_MM {mm}\n#define TF_HOST_MOE {moe}\n#define TF_HOST_MMF {mmf}\n",
        include_str!("../../../kernels/matmul.cu"),
        include_str!("../../../kernels/mmg.cu"),
        include_str!("../../../kernels/quant.cu"),
        moe_part,
    )
}
