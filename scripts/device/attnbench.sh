#!/usr/bin/env bash
# Attention alone at decode over caches of 4096 .. 262,144 positions (Nemotron-H 8B and the
# default model's shapes; one tile, and tiled with two passes) on the H200 machine, from the
# repository root:
#   bash scripts/device/attnbench.sh [--iters N]
# needs dist/tf-cuda-attnbench, built here with
#   cargo build --release -p tf-cuda --example tf-cuda-attnbench && cp target/release/examples/tf-cuda-attnbench dist/
# Times only (correctness: scripts/device/contract.sh). Prints PASS/FAIL last and exits non-zero
# on failure; writes $OUT/attnbench.md.
set -uo pipefail
. scripts/device/env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader
./dist/tf-cuda-attnbench "$@" 2>&1 | tee "${OUT:-/tmp}/attnbench.md"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] && echo "attnbench: PASS" || echo "attnbench: FAIL (exit $rc)"
exit "$rc"
