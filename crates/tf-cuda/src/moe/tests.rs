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
