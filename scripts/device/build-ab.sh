#!/usr/bin/env bash
# A build's receipts, then its Bolt figures alternated with a base build's in the same call (the
# only comparison the device's noise allows), from the repository root on the H200 machine:
#   bash scripts/device/build-ab.sh BASE_DIR [ROUNDS]
# dist/ holds the build under test (tensorfold, tf-cuda-contract, tf-cuda-nemotron,
# tf-cuda-muse, tf-cuda-synthetic, tf-cuda-mmbench), BASE_DIR the base's tf-cuda-synthetic and
# tf-cuda-mmbench (built here with
#   cargo build --profile ci -p tensorfold -p tf-cuda --bins --examples
# from target/ci/ and target/ci/examples/; a base from a worktree of the base commit). First
# the receipts of the build under test (ab-common.sh); then per round the one-row matmuls at
# Bolt's shapes (`tf-cuda-mmbench --quick --only bolt`) and Bolt's decode (`tf-cuda-synthetic
# --model bolt --bench 16`), test and base alternated. (scripts/device/ab.sh does the same for
# the default model's shape and Lightning, through `tensorfold bench`, without the receipts.)
# Each build compiles its kernels once (80-150 s the first time; cached on disk after): the
# base's compile runs beside the receipts. ROUNDS=2 took 291 and 351 s (session 17, calls 2
# and 3; 510 s in call 1, before the overlap).
set -uo pipefail
base=${1:?usage: build-ab.sh BASE_DIR [ROUNDS]}
rounds=${2:-2}
. scripts/device/ab-common.sh
# The base's kernels compiled (and cached) while the receipts run.
timeout 400 "$base/tf-cuda-mmbench" --quick --only "bolt shared up" --iters 1 >"$out/warm-base.log" 2>&1 &
warm=$!
receipts
wait "$warm"
for r in $(seq 1 "$rounds"); do
  for d in ./dist "$base"; do
    b=base; [ "$d" = ./dist ] && b=test
    step "mm-$b-$r" 200 "$d/tf-cuda-mmbench" --quick --only bolt
    awk -F'|' '/CHECK/ || ($2 ~ /mma/ && $6 + 0 <= 4)' "$out/mm-$b-$r.log" | cut -d'|' -f2,6,7
    step "bolt-$b-$r" 200 "$d/tf-cuda-synthetic" --model bolt --bench 16
    grep -E '^\| [0-9]+ \|' "$out/bolt-$b-$r.log"
  done
done
[ "$fails" = 0 ] && echo "build-ab: PASS" || echo "build-ab: FAIL ($fails steps failed)"
[ "$fails" = 0 ]
