//! Host tests of the MoE operators' tables and checks.

use super::*;
use crate::weights::GpuFormat;

#[test]
fn every_weight_format_has_a_grouped_expert_matmul() {
    for f in GpuFormat::ALL {
        let k = format!("tf_moe_matmul_{}", f.kernel_tag());
        assert!(KERNEL_NAMES.contains(&k.as_str()), "{k}");
    }
    // Control: a tag with no kernel is not found.
    assert!(!KERNEL_NAMES.contains(&"tf_moe_matmul_q5_k"));
}

#[test]
fn routing_parameters_are_checked() {
    let muse = |n_experts, top_k| Routing::Muse {
        n_experts,
        top_k,
        multiplier: 1.0,
        scale: 1.0,
    };
    assert!(muse(8, 2).validate().is_ok());
    assert!(muse(8, 9).validate().is_err());
    assert!(muse(8, 0).validate().is_err());
    let grouped = |n_group, topk_group, top_k| {
        Routing::Grouped(RouteParams {
            n_experts: 16,
            top_k,
            n_group,
            topk_group,
            scaling: 1.0,
            norm_topk_prob: true,
            dropped: DroppedGroups::Zero,
        })
    };
    assert!(grouped(4, 2, 4).validate().is_ok());
    assert_eq!(grouped(4, 2, 4).n_experts(), 16);
    assert_eq!(grouped(4, 2, 4).top_k(), 4);
    // 2 kept groups of 4 cannot supply 9 picks; 3 groups do not divide 16.
    assert!(grouped(4, 2, 9).validate().is_err());
    assert!(grouped(3, 1, 2).validate().is_err());
}

/// Host emulation of kernels/moe.cu's rank key: for every pair of (score, id) among special
/// and ordinary values, `key(a) > key(b)` exactly when `tf_moe_ranks_before(a, b)`, for both
/// tie orders; a planted key that drops the -0 == +0 rule must disagree somewhere.
#[test]
fn rank_keys_order_experts_as_ranks_before() {
    let Some(cxx) = crate::host_cxx::compiler() else {
        return;
    };
    let src = include_str!("../../kernels/moe.cu");
    let before =
        crate::host_cxx::extract(src, "__device__ __forceinline__ bool tf_moe_ranks_before");
    let key = crate::host_cxx::extract(
        src,
        "__device__ __forceinline__ unsigned long long tf_moe_rank_key",
    );
    let planted = key
        .replace("tf_moe_rank_key", "planted_rank_key")
        .replace("s == 0.0f ? 0.0f : s", "s");
    assert_ne!(planted, key.replace("tf_moe_rank_key", "planted_rank_key"));
    let main = r#"
int main(int, char** argv) {
    const float inf = __int_as_float(0x7f800000), nan = __int_as_float(0x7fc00000);
    const float v[] = {nan, -nan, inf, -inf, -0.0f, 0.0f, 1.0f, -1.0f, 0.5f, -2.5f,
                       1e-45f, -1e-45f, 3.4e38f, -3.4e38f, 0.25f, 0.25f};
    const int n = sizeof(v) / sizeof(v[0]);
    long bad0 = 0, bad1 = 0, planted = 0;
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++)
            for (int ia = 0; ia < 3; ia++)
                for (int ib = 0; ib < 3; ib++) {
                    if (a == b && ia == ib) continue;
                    const int ea = 3 * a + ia, eb = 3 * b + ib;
                    bad0 += (tf_moe_rank_key<0>(v[a], ea) > tf_moe_rank_key<0>(v[b], eb)) !=
                            tf_moe_ranks_before<0>(v[a], ea, v[b], eb);
                    bad1 += (tf_moe_rank_key<1>(v[a], ea) > tf_moe_rank_key<1>(v[b], eb)) !=
                            tf_moe_ranks_before<1>(v[a], ea, v[b], eb);
                    planted += (planted_rank_key<0>(v[a], ea) > planted_rank_key<0>(v[b], eb)) !=
                               tf_moe_ranks_before<0>(v[a], ea, v[b], eb);
                }
    FILE* f = std::fopen(argv[2], "w");
    std::fprintf(f, "%ld %ld %ld", bad0, bad1, planted);
    std::fclose(f);
    return 0;
}
"#;
    let program = format!(
        "{}\ntemplate <int PLANT>\n{before}\ntemplate <int PLANT>\n{key}\ntemplate <int PLANT>\n{planted}\n{main}",
        crate::host_cxx::SIMT_PRELUDE
    );
    let (dir, exe) = crate::host_cxx::build(&cxx, "rank-key", &program);
    let out = crate::host_cxx::run(&dir, &exe, "pairs", &[]);
    let counts: Vec<i64> = String::from_utf8_lossy(&out)
        .split_whitespace()
        .map(|t| t.parse().expect("a count"))
        .collect();
    assert_eq!(counts[0], 0, "ties to the lower id");
    assert_eq!(
        counts[1], 0,
        "ties to the higher id (the planted router's order)"
    );
    assert!(counts[2] > 0, "the planted key (-0 above +0) went uncaught");
}
