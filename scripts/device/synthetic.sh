#!/usr/bin/env bash
# Synthetic checkpoints on the H200 machine (weights generated on the GPU, no model files), from
# the repository root:
#   bash scripts/device/synthetic.sh [ARGS...]
# needs dist/tf-cuda-synthetic, built here with
#   cargo build --release -p tf-cuda --example tf-cuda-synthetic && cp target/release/examples/tf-cuda-synthetic dist/
# Default: decode on the Llama-3-8B shape at Q4_0, the default model's shape (Q4_1, Q8_0
# embedding) [GpuLlama], and the Lightning and Bolt shapes in their MLX 4-bit layout
# [GpuNemotronH], each after a device-vs-host generator check; decode tok/s at 1/4/16/64
# streams with the memory-roofline fraction. Prints PASS/FAIL last and exits non-zero on
# failure. Writes the output to $OUT/synthetic.md. Other runs, e.g.:
#   bash scripts/device/synthetic.sh --model bolt:q4_0 --bench 16
#   bash scripts/device/synthetic.sh --fill bolt --fill lightning:q8_0   (fill only: bytes, time, memory)
set -uo pipefail
. scripts/device/env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
args=("$@")
if [ ${#args[@]} -eq 0 ]; then
  args=(--model llama3-8b:q4_0 --model "smollm2-135m:q4_1,embed=q8_0,dense=f32"
        --model lightning --model bolt --bench 32)
fi
./dist/tf-cuda-synthetic "${args[@]}" 2>&1 | tee "${OUT:-/tmp}/synthetic.md"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] && echo "synthetic: PASS" || echo "synthetic: FAIL (exit $rc)"
exit "$rc"
