//! A latent MoE's fc2 with the combine made as it stages its row (kernels/moe.cu's
//! `tf_moe_combine_slices_*_one`), compiled for the host and run under the SIMT emulation: its
//! outputs must be, bit for bit, those of `tf_moe_combine` then `tf_slices_*_one` on the
//! combined row, whatever its row groups a warp; the planted combine (picks in reverse) must
//! differ.

use super::weights;
use crate::weights::GpuFormat;
use tf_kernels::contract::Rng;

/// Reads (i32 fmt (0 bf16, 1 MLX 4-bit), rows, cols, picks k, expert rows, weight bytes; the
/// weight bytes, the expert rows (f32), where (k i32) and the pick weights (k f32)); writes the
/// two launches' y, the folded launch's y at one and three row groups a warp, and the planted
/// combine's y.
const MAIN: &str = r#"
int main(int argc, char** argv) {
    FILE *fi, *fo;
    if (!tf_open_io(argc, argv, &fi, &fo)) return 2;
    int h[6];
    if (std::fread(h, 4, 6, fi) != 6) return 3;
    const int fmt = h[0], rows = h[1], cols = h[2], k = h[3], slots = h[4], nb = h[5];
    std::vector<u8> W(nb);
    std::vector<float> yg((size_t)slots * cols), wt(k);
    std::vector<int> where(k);
    if (std::fread(W.data(), 1, nb, fi) != (size_t)nb) return 3;
    if (std::fread(yg.data(), 4, yg.size(), fi) != yg.size()) return 3;
    if (std::fread(where.data(), 4, k, fi) != (size_t)k) return 3;
    if (std::fread(wt.data(), 4, k, fi) != (size_t)k) return 3;
    const int rr = fmt ? 4 : 2, groups = (rows + rr - 1) / rr;
    const size_t smem = (size_t)(cols + 1023) / 1024 * 4096;
    auto blocks = [&](int per) { return D3{(unsigned)(((groups + per - 1) / per * 32 + 127) / 128), 1, 1}; };
    auto product = [&](const std::vector<float>& x, std::vector<float>& y) {
        tf_launch(blocks(1), 128, smem, [&] { (fmt ? tf_slices_mlx4_one : tf_slices_bf16_one)(W.data(), x.data(), y.data(), rows, cols, 1); });
    };
    auto folded = [&](int per, std::vector<float>& y) {
        tf_launch(blocks(per), 128, smem, [&] { (fmt ? tf_moe_combine_slices_mlx4_one : tf_moe_combine_slices_bf16_one)(W.data(), yg.data(), where.data(), wt.data(), y.data(), rows, cols, k, per); });
    };
    std::vector<float> combined(cols), planted(cols), y1(rows), y2(rows), y3(rows), yp(rows);
    const D3 cgrid{1, (unsigned)((cols + 255) / 256), 1};
    tf_launch(cgrid, 256, 0, [&] { tf_moe_combine(yg.data(), where.data(), wt.data(), wt.data(), combined.data(), k, cols, 0, 0.0f); });
    product(combined, y1);
    folded(1, y2);
    folded(3, y3);
    tf_launch(cgrid, 256, 0, [&] { tf_plant_moe_combine_reversed(yg.data(), where.data(), wt.data(), wt.data(), planted.data(), k, cols, 0, 0.0f); });
    product(planted, yp);
    for (auto* v : {&y1, &y2, &y3, &yp}) std::fwrite(v->data(), 4, v->size(), fo);
    std::fclose(fo);
    return 0;
}
"#;

/// moe.cu's combine and the folded entries (after the harness's kernels, slices.cu among them).
fn combine_source() -> String {
    let moe = include_str!("../../../kernels/moe.cu");
    let (Some(b), Some(e)) = (
        moe.find("// Weighted combine"),
        moe.find("// ---- row operators"),
    ) else {
        panic!("moe.cu lost its combine section markers");
    };
    format!("{}\n{}\n{MAIN}", super::harness::host_kernels(), &moe[b..e])
}

#[test]
fn fc2_making_the_combined_row_gives_the_two_launches_bits() {
    let Some(cxx) = crate::host_cxx::compiler() else {
        return;
    };
    let (dir, exe) = crate::host_cxx::build(&cxx, "combine_slices", &combine_source());
    let mut rng = Rng::new(0xc0b1);
    // Nine picks, one of them missing (position -1), over ten expert rows; 1,088 columns: a
    // partial last 1,024-column stride of the staged row.
    let (rows, cols, k, slots) = (37usize, 1088usize, 9usize, 10usize);
    let where_: [i32; 9] = [3, 0, 7, -1, 9, 1, 4, 8, 2];
    for (fmt, format) in [(0, GpuFormat::Bf16), (1, GpuFormat::Mlx4)] {
        let (_, bytes) = weights(format, rows, cols, &mut rng);
        let mut input = Vec::new();
        for v in [fmt, rows, cols, k, slots, bytes.len()] {
            input.extend((v as i32).to_le_bytes());
        }
        input.extend_from_slice(&bytes);
        for _ in 0..slots * cols {
            input.extend(rng.uniform(-2.0, 2.0).to_le_bytes());
        }
        input.extend(where_.iter().flat_map(|v| v.to_le_bytes()));
        for _ in 0..k {
            input.extend(rng.uniform(0.0, 0.3).to_le_bytes());
        }
        let out = crate::host_cxx::floats(&crate::host_cxx::run(
            &dir,
            &exe,
            &format!("{format:?}"),
            &input,
        ));
        let [y1, y2, y3, yp] = [0, 1, 2, 3].map(|i| &out[i * rows..(i + 1) * rows]);
        assert!(y1.iter().all(|v| v.is_finite()) && y1.iter().any(|&v| v != 0.0));
        assert_eq!(crate::host_cxx::differing(y2, y1), 0, "{format:?}: folded");
        assert_eq!(
            crate::host_cxx::differing(y3, y1),
            0,
            "{format:?}: three groups a warp"
        );
        // Control: the picks added in reverse change the products' bits.
        assert_ne!(
            crate::host_cxx::differing(yp, y1),
            0,
            "{format:?}: the plant"
        );
    }
}
