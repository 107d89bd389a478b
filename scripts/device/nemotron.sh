#!/usr/bin/env bash
# Nemotron-H / Puzzle on the GPU against the CPU engine, bit for bit (forms whose matmuls take
# tf_slices, the GPU's own order: top-1 everywhere and max |dlogit| <= 1e-3), on every fixture
# form under fixtures/nemotron_h (fidelity at every position of the prompt + 16 greedy tokens;
# chunked == serial; concurrent == solo; graphed == eager; reset: bit for bit on the GPU), on
# the H200 machine, from the repository root:
#   bash scripts/device/nemotron.sh [--strict] [PATH ...]
# needs dist/tf-cuda-nemotron, built here with
#   cargo build --release -p tf-cuda --example tf-cuda-nemotron && cp target/release/examples/tf-cuda-nemotron dist/
# Decode speed on a synthetic model (weights generated on the device, no CPU comparison):
#   ./dist/tf-cuda-nemotron --synthetic lightning:q4_0 --bench 64
# Forms refused by name (a weight format without a CUDA kernel) are listed; --strict fails on them.
# Prints PASS / FAIL last and exits non-zero on any mismatch (1) or error (2).
set -uo pipefail
. scripts/device/env.sh
out="${OUT:-/tmp}"
args=("$@")
has_path=0
for a in "${args[@]}"; do [ "${a#--}" = "$a" ] && has_path=1; done
[ $has_path = 1 ] || args+=(fixtures/nemotron_h)
./dist/tf-cuda-nemotron --greedy 16 "${args[@]}" 2>&1 | tee "$out/nemotron.md"
rc=${PIPESTATUS[0]}
if [ "$rc" = 0 ]; then echo "nemotron.sh: PASS"; else echo "nemotron.sh: FAIL (exit $rc)"; fi
exit "$rc"
