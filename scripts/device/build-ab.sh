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
. scripts/device/env.sh >/dev/null
rounds=${1:-2}
out="${OUT:-/tmp}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
fails=0
step() {
  local name=$1; shift
  local t0=$SECONDS
  timeout "$@" >"$out/$name.log" 2>&1
  local rc=$?
  echo "== $name: exit $rc, $((SECONDS - t0)) s"
  return $rc
}
step contract 240 ./dist/tf-cuda-contract --out "$out/contract.md" || fails=$((fails + 1))
tail -1 "$out/contract.log"
step nemotron 120 bash scripts/device/nemotron.sh || fails=$((fails + 1))
tail -1 "$out/nemotron.log"
step muse 60 bash scripts/device/muse.sh || fails=$((fails + 1))
tail -1 "$out/muse.log"
step fixtures 150 bash scripts/device/fixtures.sh || fails=$((fails + 1))
echo "$(grep -c '^PASS' "$out/fixtures.log") fixtures PASS"; grep FAIL "$out/fixtures.log" | head -3
for r in $(seq 1 "$rounds"); do
  for b in dist dist-base; do
    step "mm-$b-$r" 200 "./$b/tf-cuda-mmbench" --quick --only bolt || fails=$((fails + 1))
    grep -E '_one|CHECK' "$out/mm-$b-$r.log" | cut -d'|' -f2,7
  done
  for b in dist dist-base; do
    step "bolt-$b-$r" 200 "./$b/tf-cuda-synthetic" --model bolt --bench 16 || fails=$((fails + 1))
    grep -E '^\| [0-9]+ \|' "$out/bolt-$b-$r.log"
  done
done
[ "$fails" = 0 ] && echo "build-ab: PASS" || echo "build-ab: FAIL ($fails steps failed)"
[ "$fails" = 0 ]
