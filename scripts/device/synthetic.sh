#!/usr/bin/env bash
# Synthetic checkpoints on the H200 machine (weights generated on the GPU, no model files), from
# the repository root:
#   bash scripts/device/synthetic.sh [ARGS...]
# needs dist/tf-cuda-synthetic, built here with
#   cargo build --release -p tf-cuda --example tf-cuda-synthetic && cp target/release/examples/tf-cuda-synthetic dist/
# Default: GpuLlama decode on the Llama-3-8B shape at Q4_0 and the default model's shape
# (Q4_1, Q8_0 embedding), each after a device-vs-host generator check; then every tensor of the
# Bolt shape (MLX 4-bit, as its MLX build) and the Lightning shape filled on the device. Prints
# PASS/FAIL last and exits non-zero on failure. Writes the output to $OUT/synthetic.md.
# Nemotron decode on the Lightning / Bolt shapes (GpuNemotronH; needs its stacked-expert loader
# to take synthetic experts, see tf_cuda::synthetic::experts):
#   bash scripts/device/synthetic.sh --model lightning --model bolt --bench 32
set -uo pipefail
. scripts/device/env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
args=("$@")
if [ ${#args[@]} -eq 0 ]; then
  args=(--model llama3-8b:q4_0 --model "smollm2-135m:q4_1,embed=q8_0,dense=f32" --bench 64
        --fill bolt --fill lightning)
fi
./dist/tf-cuda-synthetic "${args[@]}" 2>&1 | tee "${OUT:-/tmp}/synthetic.md"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] && echo "synthetic: PASS" || echo "synthetic: FAIL (exit $rc)"
exit "$rc"
