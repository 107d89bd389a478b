//! kernels/moe.cu's grouped routing compiled for the host with a C++ compiler (no GPU) and run
//! under the SIMT emulation: every row's picks (experts and weights) must equal tf_kernels'
//! `route` bit for bit — 368 and 512 experts with top 9 (the candidate path), top 40 (every
//! expert ranked), grouped routing with dropped groups, twin experts (equal scores, ties to the
//! lower id), a NaN logit — at 512 threads (the launch's) and at 96 (chunks that do not divide
//! the experts); the planted control (ties toward the higher id) must differ. The one-row
//! launch that also sorts (`tf_moe_route_grouped_sorted`) must give the same picks and the
//! expert lists of a counting sort. Skipped, with a message, when no C++ compiler runs (`$CXX`, else `c++`); `TF_CUDA_REQUIRE_CXX=1` makes that a
//! failure.

use std::io::Write;
use tf_kernels::contract::Rng;
use tf_kernels::ops::{route, DroppedGroups, Pick, RouteParams, RouteScratch};

/// Reads cases from argv[1] (i32 n, experts, top_k, n_group, topk_group, norm, neg_inf, threads,
/// kind (0 routing, 1 the plant, 2 routing and sorting, n = 1), f32 scaling, then n * experts
/// logits and experts corrections), writes each case's n * top_k expert ids (i32) and weights
/// (f32) to argv[2], and for kind 2 then offsets (experts + 1), order and where (top_k each).
const MAIN: &str = r#"
int main(int argc, char** argv) {
    FILE *fi, *fo;
    if (!tf_open_io(argc, argv, &fi, &fo)) return 2;
    int h[9];
    float scaling;
    while (std::fread(h, 4, 9, fi) == 9 && std::fread(&scaling, 4, 1, fi) == 1) {
        const int n = h[0], e = h[1], k = h[2], g = h[3], tg = h[4], norm = h[5];
        const float fill = h[6] ? -INFINITY : 0.0f;
        std::vector<float> logits((size_t)n * e), corr(e);
        if (std::fread(logits.data(), 4, logits.size(), fi) != logits.size()) return 3;
        if (std::fread(corr.data(), 4, corr.size(), fi) != corr.size()) return 3;
        std::vector<int> ex((size_t)n * k, -7), offs(e + 1, -7), order(k, -7), where(k, -7);
        std::vector<float> w((size_t)n * k, -7.0f);
        const size_t e32 = (e + 31) / 32 * 32;
        const size_t smem = 8 * e32 + (2 * (size_t)e + g) * 4 + 4 * e32;
        tf_launch(D3{(unsigned)n, 1, 1}, h[7], smem, [&] {
            if (h[8] == 1) tf_plant_moe_route_tie_high(logits.data(), corr.data(), ex.data(), w.data(), e, k, g, tg, scaling, norm, fill);
            else if (h[8] == 2) tf_moe_route_grouped_sorted(logits.data(), corr.data(), ex.data(), w.data(), e, k, g, tg, scaling, norm, fill, offs.data(), order.data(), where.data());
            else tf_moe_route_grouped(logits.data(), corr.data(), ex.data(), w.data(), e, k, g, tg, scaling, norm, fill);
        });
        std::fwrite(ex.data(), 4, ex.size(), fo);
        std::fwrite(w.data(), 4, w.size(), fo);
        if (h[8] == 2) {
            std::fwrite(offs.data(), 4, offs.size(), fo);
            std::fwrite(order.data(), 4, order.size(), fo);
            std::fwrite(where.data(), 4, where.size(), fo);
        }
    }
    std::fclose(fo);
    return 0;
}
"#;

/// moe.cu's routing kernels with the host's stand-ins.
fn host_source() -> String {
    let common = crate::host_cxx::common();
    let moe = include_str!("../../kernels/moe.cu");
    let end = moe
        .find("// Dynamic shared memory: scores[n_experts], biased[n_experts]")
        .expect("moe.cu's Muse routing marker");
    let decl = "extern __shared__ unsigned long long rt_keys[];";
    assert!(moe.contains(decl), "moe.cu's routing shared memory moved");
    let route = moe[..end].replace(
        decl,
        "unsigned long long* rt_keys = (unsigned long long*)tf_dyn_smem;",
    );
    format!("{}{common}\n{route}\n{MAIN}", crate::host_cxx::SIMT_PRELUDE)
}

/// One emulated launch: its rows, parameters, block size and whether it runs the plant.
struct Case {
    logits: Vec<f32>,
    corr: Vec<f32>,
    p: RouteParams,
    threads: i32,
    plant: bool,
    /// One row, routed and sorted in one launch.
    sorted: bool,
}

/// A counting sort of one row's picks: (offsets, order, where), as tf_moe_sort lists them.
fn lists(ids: &[i32], experts: usize) -> (Vec<i32>, Vec<i32>, Vec<i32>) {
    let mut offsets = vec![0i32; experts + 1];
    for &e in ids {
        offsets[e as usize + 1] += 1;
    }
    for e in 0..experts {
        offsets[e + 1] += offsets[e];
    }
    let mut order = vec![0i32; ids.len()];
    let mut place = vec![0i32; ids.len()];
    let mut next = offsets.clone();
    for (s, &e) in ids.iter().enumerate() {
        let p = next[e as usize];
        next[e as usize] += 1;
        order[p as usize] = s as i32;
        place[s] = p;
    }
    (offsets, order, place)
}

/// The CPU's picks of every row of `c`: (expert ids, weight bits).
fn cpu(c: &Case) -> (Vec<i32>, Vec<u32>) {
    let (e, k) = (c.p.n_experts, c.p.top_k);
    let mut scratch = RouteScratch::default();
    let mut picks = vec![
        Pick {
            expert: 0,
            weight: 0.0
        };
        k
    ];
    let (mut ids, mut ws) = (Vec::new(), Vec::new());
    for row in c.logits.chunks_exact(e) {
        route(row, &c.corr, &c.p, &mut scratch, &mut picks).expect("cpu route");
        ids.extend(picks.iter().map(|q| q.expert as i32));
        ws.extend(picks.iter().map(|q| q.weight.to_bits()));
    }
    (ids, ws)
}

fn params(e: usize, k: usize, groups: usize, keep: usize, neg_inf: bool) -> RouteParams {
    RouteParams {
        n_experts: e,
        top_k: k,
        n_group: groups,
        topk_group: keep,
        scaling: 2.5,
        norm_topk_prob: true,
        dropped: if neg_inf {
            DroppedGroups::NegInf
        } else {
            DroppedGroups::Zero
        },
    }
}

fn cases(rng: &mut Rng) -> Vec<Case> {
    let mut out = Vec::new();
    let mut add = |p: RouteParams, threads, twins: bool, nan: bool, plant, rng: &mut Rng| {
        let e = p.n_experts;
        let n = 5;
        let mut logits = rng.vec_uniform(n * e, -4.0, 4.0);
        let mut corr = rng.vec_uniform(e, -0.05, 0.05);
        if twins {
            // Expert 2j + 1 scores exactly as 2j: every top-k choice meets ties.
            for row in logits.chunks_exact_mut(e) {
                for j in (0..e).step_by(2) {
                    row[j + 1] = row[j];
                }
            }
            for j in (0..e).step_by(2) {
                corr[j + 1] = corr[j];
            }
        }
        if nan {
            logits[3] = f32::NAN;
        }
        out.push(Case {
            logits,
            corr,
            p,
            threads,
            plant,
            sorted: false,
        });
    };
    for threads in [512, 96] {
        add(
            params(368, 9, 1, 1, false),
            threads,
            false,
            false,
            false,
            rng,
        );
        add(
            params(512, 9, 1, 1, false),
            threads,
            true,
            false,
            false,
            rng,
        );
        add(
            params(368, 40, 1, 1, false),
            threads,
            true,
            true,
            false,
            rng,
        );
        add(params(64, 6, 8, 4, true), threads, false, true, false, rng);
        add(
            params(64, 32, 4, 2, false),
            threads,
            true,
            false,
            false,
            rng,
        );
    }
    add(params(512, 9, 1, 1, false), 512, true, false, true, rng);
    // One row routed and sorted in one launch: Bolt's expert counts, a grouped router.
    for (p, threads) in [
        (params(368, 9, 1, 1, false), 512),
        (params(512, 9, 1, 1, false), 96),
        (params(64, 6, 8, 4, true), 512),
    ] {
        out.push(Case {
            logits: rng.vec_uniform(p.n_experts, -4.0, 4.0),
            corr: rng.vec_uniform(p.n_experts, -0.05, 0.05),
            p,
            threads,
            plant: false,
            sorted: true,
        });
    }
    out
}

#[test]
fn grouped_routing_compiled_for_the_host_gives_the_cpu_picks() {
    let Some(cxx) = crate::host_cxx::compiler() else {
        return;
    };
    let cases = cases(&mut Rng::new(0x70a7e));
    let (dir, exe) = crate::host_cxx::build(&cxx, "route", &host_source());
    let mut f = Vec::new();
    for c in &cases {
        let p = &c.p;
        let n = (c.logits.len() / p.n_experts) as i32;
        for v in [
            n,
            p.n_experts as i32,
            p.top_k as i32,
            p.n_group as i32,
            p.topk_group as i32,
            i32::from(p.norm_topk_prob),
            i32::from(matches!(p.dropped, DroppedGroups::NegInf)),
            c.threads,
            if c.sorted { 2 } else { i32::from(c.plant) },
        ] {
            f.write_all(&v.to_le_bytes()).unwrap();
        }
        f.write_all(&p.scaling.to_le_bytes()).unwrap();
        for x in c.logits.iter().chain(&c.corr) {
            f.write_all(&x.to_le_bytes()).unwrap();
        }
    }
    let all = crate::host_cxx::run(&dir, &exe, "cases", &f);
    let _ = std::fs::remove_dir_all(&dir);
    let word = |i: usize| u32::from_le_bytes(all[4 * i..4 * i + 4].try_into().unwrap());
    let mut at = 0;
    let mut failures = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        let len = c.logits.len() / c.p.n_experts * c.p.top_k;
        let ids: Vec<i32> = (0..len).map(|j| word(at + j) as i32).collect();
        let ws: Vec<u32> = (0..len).map(|j| word(at + len + j)).collect();
        at += 2 * len;
        let mut equal = (ids.clone(), ws) == cpu(c);
        if c.sorted {
            let e = c.p.n_experts;
            let n = e + 1 + 2 * len;
            let got: Vec<i32> = (0..n).map(|j| word(at + j) as i32).collect();
            at += n;
            let (o, r, w) = lists(&cpu(c).0, e);
            equal &= got == [o, r, w].concat();
        }
        let label = format!(
            "case {i}: {} experts top {} groups {} at {} threads{}{}",
            c.p.n_experts,
            c.p.top_k,
            c.p.n_group,
            c.threads,
            if c.plant { " (plant)" } else { "" },
            if c.sorted { " (routed and sorted)" } else { "" }
        );
        if equal == c.plant {
            failures.push(format!("{label}: GPU {ids:?} vs CPU {:?}", cpu(c).0));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
