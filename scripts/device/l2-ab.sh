#!/usr/bin/env bash
# The L2 prefetch sites (src/l2.rs, `TF_CUDA_L2`) timed against each other in one call, from
# the repository root on the H200 machine:
#   bash scripts/device/l2-ab.sh [ROUNDS [VALUE...]]
# VALUEs default to `0` (none), main's default `within,next`, and each site alone. Needs
# dist/tf-cuda-synthetic, dist/tf-cuda-nemotron and dist/tf-cuda-muse of one build (built here
# with `cargo build --profile ci -p tensorfold -p tf-cuda --bins --examples`, from
# target/ci/examples/). First `nemotron.sh` and `muse.sh` with main's sites on, then per round
# Bolt at one stream with each VALUE in turn, then Bolt at one and four streams and the
# leave-out (where each kernel's cost inside the step shows which products the prefetches
# helped) with the first two VALUEs. Prints a line a run; the logs go to $OUT. The first run
# compiles the kernels (about 80 s on a fresh machine).
set -uo pipefail
rounds=${1:-3}
values=("${@:2}")
[ ${#values[@]} -gt 0 ] || values=(0 within,next within next)
. scripts/device/ab-common.sh
step nemotron 120 bash scripts/device/nemotron.sh
tail -1 "$out/nemotron.log"
step muse 60 bash scripts/device/muse.sh
tail -1 "$out/muse.log"
bolt() {
  local name=$1 v=$2; shift 2
  step "$name" 150 env TF_CUDA_L2="$v" ./dist/tf-cuda-synthetic --model bolt --bench 16 "$@"
  echo "$name (TF_CUDA_L2=$v): $(grep -E '^\| [0-9]+ \|' "$out/$name.log" | cut -d'|' -f2-4 | tr '\n' ' ')"
}
for r in $(seq 1 "$rounds"); do
  for i in "${!values[@]}"; do bolt "bolt-$i-$r" "${values[$i]}" --streams 1; done
done
for i in 0 1; do
  bolt "streams-$i" "${values[$i]}" --streams 1,4
  bolt "leave-$i" "${values[$i]}" --streams 1 --leave-out 4
done
[ "$fails" = 0 ] && echo "l2-ab: PASS" || echo "l2-ab: FAIL ($fails steps failed)"
[ "$fails" = 0 ]
