#!/usr/bin/env bash
# The matmul kernels alone at decode shapes (Lightning MLX 4-bit, Llama-3-8B Q4_0, one matrix of
# each other format) on the H200 machine, from the repository root:
#   bash scripts/device/mmbench.sh [--quick] [--iters N] [--peak BYTES_PER_S]
# needs dist/tf-cuda-mmbench, built here with
#   cargo build --release -p tf-cuda --example tf-cuda-mmbench && cp target/release/examples/tf-cuda-mmbench dist/
# Checks GPU == CPU bits (1 and 5 rows; fused == plain; a planted control caught), then times
# back-to-back launches (CUDA events, weights cycled past L2): us per call, GB/s, fraction of
# the roofline. Prints PASS/FAIL last and exits non-zero on failure; writes $OUT/mmbench.md.
set -uo pipefail
. scripts/device/env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader
./dist/tf-cuda-mmbench "$@" 2>&1 | tee "${OUT:-/tmp}/mmbench.md"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] && echo "mmbench: PASS" || echo "mmbench: FAIL (exit $rc)"
exit "$rc"
