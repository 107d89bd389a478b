#!/usr/bin/env bash
# The tensor-core probe (crates/tf-cuda/kernels/probe/mma_mlx4.cu) beside the engine's one-row
# MLX 4-bit products, on the H200 machine, from the repository root:
#   bash scripts/device/mmaprobe.sh [--iters N]
# needs dist/tf-cuda-mmaprobe and dist/tf-cuda-mmbench, built here with
#   cargo build --profile ci -p tf-cuda --examples
# and copied from target/ci/examples/. The probe's checks (error against the float64
# reference, a row alone == its column among eight, a planted layout caught) and times at
# Bolt's shapes, then `tf-cuda-mmbench --quick --only bolt` for tf_slices at the same shapes.
# Writes $OUT/mmaprobe.md and $OUT/mmbench.md; prints PASS/FAIL last. Not yet run on a GPU.
set -uo pipefail
. scripts/device/env.sh
out="${OUT:-/tmp}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
./dist/tf-cuda-mmaprobe "$@" 2>&1 | tee "$out/mmaprobe.md"
probe=${PIPESTATUS[0]}
./dist/tf-cuda-mmbench --quick --only bolt 2>&1 | tee "$out/mmbench.md"
bench=${PIPESTATUS[0]}
[ "$probe" = 0 ] && [ "$bench" = 0 ] && echo "mmaprobe: PASS" || echo "mmaprobe: FAIL (probe $probe, mmbench $bench)"
[ "$probe" = 0 ] && [ "$bench" = 0 ]
