//! A one-token round's folded products built for the host: the expert products' (kernels/moe.cu:
//! the `_relu2` and `_combine` entries; relu² and its split made by the up product's last block
//! of each group, the combine by the down product's last block of each column of tiles) give
//! the bits of the kernels they replace and leave their arrival counts at zero; Mamba's in_proj
//! with the conv step (kernels/in_proj_conv.cu) gives the product's and `tf_mamba_conv`'s.

use super::*;

/// Reads (experts, inter, dim, picks k, compact, tiles a block, stale), the up stack's and the
/// down stack's rows-layout bytes, the picks, their weights and the token's row; writes the
/// unfolded kernels' up, act, sums, parts, yg and combined row (`_one` up product,
/// `tf_moe_relu2_split`, the gathered down product, `tf_moe_combine`), then the folded ones'
/// (counts cleared, or with `stale` an arrival left at 1 in group 0's count), then the counts.
const FOLD_MAIN: &str = r#"
int main(int argc, char** argv) {
    FILE *fi, *fo;
    TfIn in;
    if (!tf_open_io(argc, argv, &fi, &fo) || !tf_read_all(fi, &in)) return 1;
    const int ne = in.i(), inter = in.i(), dim = in.i(), k = in.i(), compact = in.i(), rt = in.i(), stale = in.i();
    const std::vector<int> upw = in.vi((size_t)ne * inter * dim / 32 * 6), downw = in.vi((size_t)ne * dim * inter / 32 * 6);
    const std::vector<int> picks = in.vi(k);
    const std::vector<float> weights = in.vf(k), x = in.vf(dim);
    auto tile = [&](const std::vector<int>& src, int rows, int cols) {
        const size_t nt = (size_t)rows / 16 * (cols / 64);
        std::vector<u8> t(nt * (compact ? 576 : 640));
        const D3 g{(unsigned)((nt * 32 + 255) / 256), 1, 1};
        const u8* s = (const u8*)src.data();
        if (compact) tf_launch(g, 256, 0, [&] { tf_mma_tile_mlx4_b16(s, t.data(), rows, cols); });
        else tf_launch(g, 256, 0, [&] { tf_mma_tile_mlx4(s, t.data(), rows, cols); });
        return t;
    };
    const std::vector<u8> up_t = tile(upw, ne * inter, dim), down_t = tile(downw, ne * dim, inter);
    // A one-token round's slots in expert order: where_[j] is pick j's (each expert once).
    std::vector<int> offsets(ne + 1), where(k, -1);
    for (int j = 0; j < k; j++) if (picks[j] >= 0) offsets[picks[j] + 1]++;
    for (int e = 0; e < ne; e++) offsets[e + 1] += offsets[e];
    for (int j = 0; j < k; j++) if (picks[j] >= 0) where[j] = offsets[picks[j]];
    std::vector<uint4> xp(dim / 4);
    std::vector<float> xs(dim / 64);
    tf_launch(D3{(unsigned)((dim / 64 + 3) / 4), 1, 1}, 128, 0, [&] { tf_mma_split(x.data(), xp.data(), xs.data(), 1, dim); });
    const D3 gu{(unsigned)(inter / 16 / rt), (unsigned)k, 1}, gd{(unsigned)(dim / 16 / rt), (unsigned)std::min(ne, k), 1};
    std::vector<int> counts(std::max(k * inter / 64, dim / 16));
    for (int fold = 0; fold < 2; fold++) {
        std::vector<float> up((size_t)k * inter), act(up.size()), sums(up.size() / 64), yg((size_t)k * dim), out(dim);
        std::vector<uint4> parts(up.size() / 4);
        const u8 *U = up_t.data(), *D = down_t.data();
        if (!fold) {
            tf_launch(gu, FOLD_THREADS, 0, [&] {
                if (rt == 1) (compact ? tf_moe_mma_mlx4_split_r1_x4_one_b16 : tf_moe_mma_mlx4_split_r1_x4_one)(U, xp.data(), xs.data(), up.data(), picks.data(), where.data(), inter, dim, ne);
                else (compact ? tf_moe_mma_mlx4_split_x4_one_b16 : tf_moe_mma_mlx4_split_x4_one)(U, xp.data(), xs.data(), up.data(), picks.data(), where.data(), inter, dim, ne);
            });
            tf_launch(D3{(unsigned)k, (unsigned)((inter / 64 + 3) / 4), 1}, 128, 0, [&] { tf_moe_relu2_split(up.data(), act.data(), parts.data(), sums.data(), inter); });
            tf_launch(gd, FOLD_THREADS, 0, [&] {
                if (rt == 1) (compact ? tf_moe_mma_mlx4_split_r1_x4_b16 : tf_moe_mma_mlx4_split_r1_x4)(D, parts.data(), sums.data(), yg.data(), offsets.data(), dim, inter, ne);
                else (compact ? tf_moe_mma_mlx4_split_x4_b16 : tf_moe_mma_mlx4_split_x4)(D, parts.data(), sums.data(), yg.data(), offsets.data(), dim, inter, ne);
            });
            tf_launch(D3{1, (unsigned)((dim + 255) / 256), 1}, 256, 0, [&] { tf_moe_combine(yg.data(), where.data(), weights.data(), weights.data(), out.data(), k, dim, 0, 0.0f); });
        } else {
            if (stale) counts[0] = 1;
            tf_launch(gu, FOLD_THREADS, 0, [&] {
                if (rt == 1) (compact ? tf_moe_mma_mlx4_split_r1_x4_one_relu2_b16 : tf_moe_mma_mlx4_split_r1_x4_one_relu2)(U, xp.data(), xs.data(), up.data(), picks.data(), where.data(), inter, dim, ne, act.data(), parts.data(), sums.data(), counts.data());
                else (compact ? tf_moe_mma_mlx4_split_x4_one_relu2_b16 : tf_moe_mma_mlx4_split_x4_one_relu2)(U, xp.data(), xs.data(), up.data(), picks.data(), where.data(), inter, dim, ne, act.data(), parts.data(), sums.data(), counts.data());
            });
            tf_launch(gd, FOLD_THREADS, 0, [&] {
                if (rt == 1) (compact ? tf_moe_mma_mlx4_split_r1_x4_combine_b16 : tf_moe_mma_mlx4_split_r1_x4_combine)(D, parts.data(), sums.data(), yg.data(), offsets.data(), dim, inter, ne, where.data(), weights.data(), out.data(), counts.data(), k);
                else (compact ? tf_moe_mma_mlx4_split_x4_combine_b16 : tf_moe_mma_mlx4_split_x4_combine)(D, parts.data(), sums.data(), yg.data(), offsets.data(), dim, inter, ne, where.data(), weights.data(), out.data(), counts.data(), k);
            });
        }
        for (auto* v : {&up, &act, &sums, &yg, &out}) fwrite(v->data(), 4, v->size(), fo);
        fwrite(parts.data(), 16, parts.size(), fo);
    }
    fwrite(counts.data(), 4, counts.size(), fo);
    fclose(fo);
    return 0;
}
"#;

/// One fold case's outputs: the unfolded kernels', the folded ones', and the counts left.
struct FoldRun {
    plain: Vec<f32>,
    folded: Vec<f32>,
    counts: Vec<f32>,
}

#[test]
fn one_token_folds_give_the_unfolded_bits() {
    let Some(cxx) = host_cxx::compiler() else {
        return;
    };
    let source = format!(
        "{}\n{}\n{}\n{}\n{}\n{}\n#define FOLD_THREADS {}\n{FOLD_MAIN}",
        host_cxx::SIMT_PRELUDE,
        host_cxx::common(),
        include_str!("../../../kernels/mma.cu"),
        "#define MOE_PICK_BATCH 32",
        moe_products(),
        host_cxx::extract(
            include_str!("../../../kernels/moe.cu"),
            "template <int PLANT>\n__device__ __forceinline__ void tf_moe_combine("
        ) + "\n"
            + &host_cxx::extract(
                include_str!("../../../kernels/moe.cu"),
                "extern \"C\" __global__ void tf_moe_combine("
            ),
        32 * MOE_WARPS,
    );
    let (dir, exe) = host_cxx::build(&cxx, "moe_folds", &source);
    let mut rng = Rng::new(0x3a3a_0f01);
    let (ne, inter, dim) = (6usize, 256usize, 128usize);
    let bytes = |rows: usize, cols: usize, rng: &mut Rng| {
        let hw = HostWeights::random_mlx(4, 64, FloatType::BF16, ne * rows, cols, rng);
        device_bytes(&hw.packed())
            .expect("rows layout")
            .into_owned()
    };
    let (upw, downw) = (bytes(inter, dim, &mut rng), bytes(dim, inter, &mut rng));
    let x: Vec<f32> = (0..dim).map(|_| rng.uniform(-1.0, 1.0)).collect();
    let run = |picks: &[i32], compact: bool, rt: usize, stale: bool| {
        let k = picks.len();
        let mut input = Vec::new();
        for v in [ne, inter, dim, k, compact as usize, rt, stale as usize] {
            input.extend((v as i32).to_le_bytes());
        }
        input.extend_from_slice(&upw);
        input.extend_from_slice(&downw);
        input.extend(picks.iter().flat_map(|v| v.to_le_bytes()));
        let weights: Vec<f32> = (0..k).map(|j| 0.5 + j as f32 / 7.0).collect();
        input.extend(weights.iter().chain(&x).flat_map(|v| v.to_le_bytes()));
        let label = format!("fold-{k}-{compact}-{rt}-{stale}");
        let all = host_cxx::floats(&host_cxx::run(&dir, &exe, &label, &input));
        let half = (k * inter) * 2 + k * inter / 64 + k * dim + dim + k * inter;
        let (plain, rest) = all.split_at(half);
        let (folded, counts) = rest.split_at(half);
        FoldRun {
            plain: plain.to_vec(),
            folded: folded.to_vec(),
            counts: counts.to_vec(),
        }
    };
    // Three picks, and four with an empty one between (its block rows write nothing).
    for picks in [vec![4, 0, 2], vec![3, -1, 5, 1]] {
        for compact in [false, true] {
            for rt in [1, 2] {
                let r = run(&picks, compact, rt, false);
                let what = format!("picks {picks:?}, compact {compact}, {rt} tiles a block");
                assert_eq!(host_cxx::differing(&r.folded, &r.plain), 0, "{what}");
                assert!(
                    r.counts.iter().all(|c| c.to_bits() == 0),
                    "{what}: counts left"
                );
                let out = &r.plain[r.plain.len() - picks.len() * inter - dim..][..dim];
                assert!(out.iter().all(|v| v.is_finite()) && out.iter().any(|&v| v != 0.0));
            }
        }
    }
    // Control: an arrival left over in group 0's count lets its relu² run before its last
    // tile is written (and leaves a count behind); both must show.
    let r = run(&[4, 0, 2], false, 1, true);
    assert_ne!(
        host_cxx::differing(&r.folded, &r.plain),
        0,
        "the stale count was not caught"
    );
    assert!(r.counts.iter().any(|c| c.to_bits() != 0));
}

/// Reads (rows, cols, x_off, conv_dim, kernel, tiles a block, has_bias, pos, plant), the
/// rows-layout bytes, x, the conv weights, the bias and the conv pool (3 slots; slot 1 is the
/// round's); writes y, the conv's out and the pool after the split product of tiles x_off / 16
/// .. and `tf_mamba_conv` (`tf_plant_mamba_conv_reversed` with plant), then after the
/// product with the conv folded in.
const CONV_MAIN: &str = r#"
int main(int argc, char** argv) {
    FILE *fi, *fo;
    TfIn in;
    if (!tf_open_io(argc, argv, &fi, &fo) || !tf_read_all(fi, &in)) return 1;
    const int rows = in.i(), cols = in.i(), x_off = in.i(), cd = in.i(), kernel = in.i(), rt = in.i(), has_bias = in.i(), pos0 = in.i(), plant = in.i();
    const std::vector<int> src = in.vi((size_t)rows * cols / 32 * 6);
    const std::vector<float> x = in.vf(cols), cw = in.vf((size_t)cd * kernel), cb = in.vf(cd);
    const int stride = (kernel - 1) * cd, n_slots = 3;
    const std::vector<float> pool0 = in.vf((size_t)n_slots * stride);
    const size_t nt = (size_t)rows / 16 * (cols / 64);
    std::vector<u8> t(nt * 576);
    tf_launch(D3{(unsigned)((nt * 32 + 255) / 256), 1, 1}, 256, 0, [&] { tf_mma_tile_mlx4_b16((const u8*)src.data(), t.data(), rows, cols); });
    std::vector<uint4> xp(cols / 4);
    std::vector<float> xs(cols / 64);
    tf_launch(D3{(unsigned)((cols / 64 + 3) / 4), 1, 1}, 128, 0, [&] { tf_mma_split(x.data(), xp.data(), xs.data(), 1, cols); });
    const int slots[1] = {1}, pos[1] = {pos0}, from = x_off / 16, to = rows / 16;
    const D3 g{(unsigned)((to - from + rt - 1) / rt), 1, 1};
    for (int fold = 0; fold < 2; fold++) {
        std::vector<float> y(rows), out(cd), pool = pool0;
        if (!fold) {
            tf_launch(g, CONV_THREADS, 0, [&] {
                (rt == 1 ? tf_mma_mlx4_r1_split_x4_b16 : tf_mma_mlx4_r2_split_x4_b16)(t.data(), xp.data(), xs.data(), y.data(), 1, rows, cols, from, to);
            });
            tf_launch(D3{(unsigned)((cd + 127) / 128), 1, 1}, 128, 0, [&] {
                if (plant) tf_plant_mamba_conv_reversed(y.data(), rows, x_off, cw.data(), cb.data(), has_bias, pool.data(), slots, pos, n_slots, stride, 0, 1, cd, kernel, out.data());
                else tf_mamba_conv(y.data(), rows, x_off, cw.data(), cb.data(), has_bias, pool.data(), slots, pos, n_slots, stride, 0, 1, cd, kernel, out.data());
            });
        } else {
            tf_launch(g, CONV_THREADS, 0, [&] {
                (rt == 1 ? tf_mma_mlx4_r1_split_x4_conv_b16 : tf_mma_mlx4_r2_split_x4_conv_b16)(t.data(), xp.data(), xs.data(), y.data(), rows, cols, from, to, x_off, cw.data(), cb.data(), has_bias, pool.data(), slots, pos, n_slots, stride, 0, cd, kernel, out.data());
            });
        }
        for (auto* v : {&y, &out, &pool}) fwrite(v->data(), 4, v->size(), fo);
    }
    fclose(fo);
    return 0;
}
"#;

#[test]
fn in_proj_with_the_conv_folded_in_gives_the_product_and_conv_bits() {
    let Some(cxx) = host_cxx::compiler() else {
        return;
    };
    let source = format!(
        "{}\n{}\n{}\n{}\n{}\n#define CONV_THREADS {}\n{CONV_MAIN}",
        host_cxx::SIMT_PRELUDE,
        host_cxx::common(),
        include_str!("../../../kernels/mma.cu"),
        include_str!("../../../kernels/mamba.cu"),
        include_str!("../../../kernels/in_proj_conv.cu"),
        32 * WARPS,
    );
    let (dir, exe) = host_cxx::build(&cxx, "in_proj_conv", &source);
    let mut rng = Rng::new(0x3a3a_0f02);
    // z: 4 tiles; xBC: 96 channels (tiles 4 .. 9); dt: 32 rows.
    let (rows, cols, x_off, cd, kernel) = (192usize, 128usize, 64usize, 96usize, 4usize);
    let hw = HostWeights::random_mlx(4, 64, FloatType::BF16, rows, cols, &mut rng);
    let src = device_bytes(&hw.packed())
        .expect("rows layout")
        .into_owned();
    let x = rng.vec_uniform(cols, -1.0, 1.0);
    let (cw, cb) = (rng.vec_normal(cd * kernel, 0.5), rng.vec_normal(cd, 0.5));
    let pool = rng.vec_normal(3 * (kernel - 1) * cd, 1.0);
    let run = |rt: usize, bias: bool, pos: usize, plant: bool| {
        let mut input = Vec::new();
        for v in [
            rows,
            cols,
            x_off,
            cd,
            kernel,
            rt,
            bias as usize,
            pos,
            plant as usize,
        ] {
            input.extend((v as i32).to_le_bytes());
        }
        input.extend_from_slice(&src);
        for v in [&x, &cw, &cb, &pool] {
            input.extend(v.iter().flat_map(|f| f.to_le_bytes()));
        }
        let label = format!("conv-{rt}-{bias}-{pos}-{plant}");
        let all = host_cxx::floats(&host_cxx::run(&dir, &exe, &label, &input));
        let (plain, folded) = all.split_at(all.len() / 2);
        (plain.to_vec(), folded.to_vec())
    };
    for rt in [1, 2] {
        for (bias, pos) in [(true, 5), (false, 5), (true, 0)] {
            let (plain, folded) = run(rt, bias, pos, false);
            let what = format!("{rt} tiles a block, bias {bias}, position {pos}");
            assert_eq!(host_cxx::differing(&folded, &plain), 0, "{what}");
            let out = &plain[rows..rows + cd];
            assert!(out.iter().all(|v| v.is_finite()) && out.iter().any(|&v| v != 0.0));
        }
    }
    // Control: the reversed conv's out differs from the fold's.
    let (plain, folded) = run(1, true, 5, true);
    assert_ne!(
        host_cxx::differing(&folded, &plain),
        0,
        "the reversed conv was not caught"
    );
}
