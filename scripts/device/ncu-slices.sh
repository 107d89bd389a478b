#!/usr/bin/env bash
# What holds the one-row tf_slices entries back at Bolt's shapes: an ncu profile of one launch
# each (speed of light, memory workload, warp states, scheduler, occupancy), from the
# repository root on the H200 machine:
#   [TF_NCU_KERNEL=REGEX] bash scripts/device/ncu-slices.sh [SHAPE ...]
# TF_NCU_KERNEL picks the kernel (default 'tf_slices_.*_one'; e.g. 'tf_mma_mlx4_r1_staged').
# SHAPE: a tf-cuda-mmbench label (default: "bolt mamba in_proj", "bolt shared up", "bolt latent
# up"). Needs dist/tf-cuda-mmbench (built here with `cargo build --profile ci -p tf-cuda
# --examples`, from target/ci/examples/) and ncu (the H200 machine has it). Writes one text
# report per shape to $OUT (or /tmp). About a minute a shape.
set -uo pipefail
. scripts/device/env.sh >/dev/null
out="${OUT:-/tmp}"
[ "$#" -gt 0 ] || set -- "bolt mamba in_proj" "bolt shared up" "bolt latent up"
rc=0
for shape in "$@"; do
  name=$(echo "$shape" | tr ' ' '_')
  # The one-row launches are the 3rd of each shape's calls (calls 1 and 2 warm up).
  timeout 300 ncu --clock-control none -k "regex:${TF_NCU_KERNEL:-tf_slices_.*_one}" -s 2 -c 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
    --section SchedulerStats --section Occupancy --section LaunchStats \
    ./dist/tf-cuda-mmbench --quick --only "$shape" --iters 3 >"$out/ncu-$name.txt" 2>&1
  r=$?
  [ "$r" = 0 ] || rc=1
  echo "== $shape (exit $r)"
  grep -E 'Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Stall|Issue Slots Busy|No Eligible' \
    "$out/ncu-$name.txt" | head -30
done
exit "$rc"
