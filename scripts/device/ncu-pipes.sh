#!/usr/bin/env bash
# Which pipe or stall holds a kernel back: ncu's per-pipe utilization, instruction counts and
# stall reasons (per issued instruction) for one launch of a kernel at each tf-cuda-mmbench
# shape, from the repository root on the H200 machine:
#   [TF_NCU_KERNEL=REGEX] [TF_NCU_BENCH=PATH] bash scripts/device/ncu-pipes.sh [SHAPE ...]
# TF_NCU_KERNEL: default 'tf_mma_mlx4_r1_staged'; TF_NCU_BENCH: default ./dist/tf-cuda-mmbench.
# SHAPE: a tf-cuda-mmbench label (default "bolt mamba in_proj"). Writes ncu-pipes-SHAPE.txt to
# $OUT (or /tmp).
set -uo pipefail
. scripts/device/env.sh >/dev/null
out="${OUT:-/tmp}"
[ "$#" -gt 0 ] || set -- "bolt mamba in_proj"
metrics='regex:^sm__pipe_.*_cycles_active\.avg\.pct_of_peak_sustained_active$'
metrics+=',regex:^sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active$'
metrics+=',regex:^smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$'
metrics+=',smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active'
metrics+=',gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed'
rc=0
for shape in "$@"; do
  name=$(echo "$shape" | tr ' ' '_')
  # The one-row launches are the 3rd of each shape's calls (calls 1 and 2 warm up).
  timeout 300 ncu --clock-control none -k "regex:${TF_NCU_KERNEL:-tf_mma_mlx4_r1_staged}" -s 2 \
    -c 1 --metrics "$metrics" "${TF_NCU_BENCH:-./dist/tf-cuda-mmbench}" --quick --only "$shape" \
    --iters 3 >"$out/ncu-pipes-$name.txt" 2>&1
  r=$?
  [ "$r" = 0 ] || rc=1
  echo "== $shape (exit $r)"
  # Nonzero rows only, largest first within each kind.
  grep -E '^\s+(sm__|smsp__|gpu__|dram__)' "$out/ncu-pipes-$name.txt" |
    awk '{v = $NF; gsub(",", "", v); if (v + 0 > 0.05) print}' | head -60
  grep -E '==ERROR==|==WARNING== (Metric|Failed)' "$out/ncu-pipes-$name.txt" | head -5
done
exit "$rc"
