#!/usr/bin/env bash
# The Muse Spark forward on the GPU against the CPU engine, on the H200 machine, from the
# repository root:
#   bash scripts/device/muse.sh [MODEL_DIR ...]   (default: every fixtures/muse_spark checkpoint;
#   needs dist/tf-cuda-muse, built here with
#   cargo build --release -p tf-cuda --example tf-cuda-muse && cp target/release/examples/tf-cuda-muse dist/)
# Prints per checkpoint: fidelity (max |dlogit|, top-1, bit-identical positions; a forward that
# took tf_slices, the GPU's own order, passes within 1e-3 instead of bit for bit) and the GPU
# exactness receipts (chunked, concurrent, mixed, graphed), then PASS or FAIL; exits non-zero on
# any mismatch. A checkpoint the GPU path refuses by name is a SKIP (set STRICT=1 to fail it).
set -uo pipefail
. scripts/device/env.sh
out="${OUT:-/tmp}"
if [ "$#" -eq 0 ]; then
  set -- fixtures/muse_spark/hf-f32 fixtures/muse_spark/mlx-f32 fixtures/muse_spark/mlx-4bit
fi
strict=()
[ "${STRICT:-0}" = 1 ] && strict=(--strict)
./dist/tf-cuda-muse "$@" --steps 20 ${strict[@]+"${strict[@]}"} 2>&1 | tee "$out/muse.md"
rc=${PIPESTATUS[0]}
if [ "$rc" -eq 0 ]; then echo "muse.sh: PASS"; else echo "muse.sh: FAIL (exit $rc)"; fi
exit "$rc"
