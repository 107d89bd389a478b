#!/usr/bin/env bash
# The sampler's candidate selection on the H200 machine, from the repository root:
#   bash scripts/device/select.sh [--quick] [--iters N] [--model /tmp/tfm/model.gguf]
# needs dist/tf-cuda-select, built here with
#   cargo build --release -p tf-cuda --example tf-cuda-select && cp target/release/examples/tf-cuda-select dist/
# Checks the GPU candidates against the host selection bit for bit (vocab 49152 and 131072,
# 1..=64 rows, the logit gather, the planted ties-by-higher-id control caught), then times
# whole-row downloads against select + candidate downloads. With --model: the CUDA backend's
# forward_candidates against its forward on that checkpoint, bit for bit (reported as off while
# the GPU models do not expose their logits). Prints PASS/FAIL last and exits non-zero on
# failure; writes $OUT/select.md.
set -uo pipefail
. scripts/device/env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader
./dist/tf-cuda-select "$@" 2>&1 | tee "${OUT:-/tmp}/select.md"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] && echo "select: PASS" || echo "select: FAIL (exit $rc)"
exit "$rc"
