#!/usr/bin/env bash
# Several builds' Bolt one-stream decode alternated in one call (the only comparison the
# device's noise allows), from the repository root on the H200 machine:
#   bash scripts/device/variants-ab.sh ROUNDS DIR...
# Each DIR holds a tf-cuda-synthetic (dist/ for the build under test, dist-base/ for main's,
# dist/NAME/ for variants made here by scripts/device/variant.sh); dist/ptx-cache holds every
# build's program. Per round, each DIR in turn: `tf-cuda-synthetic --model bolt --bench 16
# --streams 1`, about 15 s. Run the receipts of any build kept first (ab-common.sh: receipts).
set -uo pipefail
rounds=${1:?usage: variants-ab.sh ROUNDS DIR...}
shift
. scripts/device/ab-common.sh
for r in $(seq 1 "$rounds"); do
  for d in "$@"; do
    name=$(echo "${d#./}" | tr '/' '-')
    step "bolt-$name-$r" 120 "$d/tf-cuda-synthetic" --model bolt --bench 16 --streams 1
    echo "$d, round $r: $(grep -E '^\| [0-9]+ \|' "$out/bolt-$name-$r.log")"
  done
done
[ "$fails" = 0 ]
