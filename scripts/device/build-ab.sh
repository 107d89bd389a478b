#!/usr/bin/env bash
# Two builds in one call (the only comparison the device's noise allows), from the repository
# root on the H200 machine:
#   bash scripts/device/build-ab.sh [ROUNDS]
# dist/ holds the build under test (tensorfold, tf-cuda-contract, tf-cuda-nemotron,
# tf-cuda-muse, tf-cuda-synthetic, tf-cuda-mmbench), dist-base/ the base's tf-cuda-synthetic and
# tf-cuda-mmbench (built here with
#   cargo build --profile ci -p tensorfold -p tf-cuda --bins --examples
# from target/ci/ and target/ci/examples/; a base from a worktree of the base commit). First
# the receipts of the build under test (the kernel contract, every Nemotron-H and Muse Spark
# fixture against the CPU engine, every fixture through `tensorfold score`); then per round the
# one-row matmuls at Bolt's shapes (`tf-cuda-mmbench --quick --only bolt`) and Bolt's decode
# (`tf-cuda-synthetic --model bolt --bench 16`), test and base alternated. Each build compiles
# its kernels once (about 80 s the first time; cached on disk after). About 8 minutes with
# ROUNDS=2 (estimated: session 12 ran these steps by hand, docs/perf.md; this script itself
# has not run yet).
set -uo pipefail
rounds=${1:-2}
. scripts/device/ab-common.sh
receipts
for r in $(seq 1 "$rounds"); do
  for b in dist dist-base; do
    step "mm-$b-$r" 200 "./$b/tf-cuda-mmbench" --quick --only bolt
    grep -E '_one|CHECK' "$out/mm-$b-$r.log" | cut -d'|' -f2,7
  done
  for b in dist dist-base; do
    step "bolt-$b-$r" 200 "./$b/tf-cuda-synthetic" --model bolt --bench 16
    grep -E '^\| [0-9]+ \|' "$out/bolt-$b-$r.log"
  done
done
[ "$fails" = 0 ] && echo "build-ab: PASS" || echo "build-ab: FAIL ($fails steps failed)"
[ "$fails" = 0 ]
