#!/usr/bin/env bash
# Two builds timed in one call, alternating, on the same machine (the only comparison the
# device's noise allows), from the repository root on the H200 machine:
#   bash scripts/device/ab.sh OLD_DIR NEW_DIR [ROUNDS]
# Each DIR holds a `tensorfold` and a `tf-cuda-synthetic` of one build (built here with
#   cargo build --profile ci -p tensorfold -p tf-cuda --bins --examples
# and copied from target/ci/ and target/ci/examples/). Each build's kernels are compiled once
# first (about a minute each, cached under $TF_CUDA_CACHE); then, per round and build,
# `tensorfold bench` at the default model's shape (decode at 1/4/16/64 streams, decode from an
# empty context) and `tf-cuda-synthetic` (the kernels alone) at that shape and Lightning's.
set -uo pipefail
. scripts/device/env.sh >/dev/null
old=${1:?usage: ab.sh OLD_DIR NEW_DIR [ROUNDS]}
new=${2:?usage: ab.sh OLD_DIR NEW_DIR [ROUNDS]}
rounds=${3:-2}
syn='smollm2-135m:q4_1,embed=q8_0,dense=f32'
bench=(bench --synthetic "$syn" --backend cuda --prompt-tokens 16 --gen-tokens 128 --repeat 1)
for d in "$old" "$new"; do
  timeout 200 "$d/tensorfold" "${bench[@]}" --streams 1 >/dev/null 2>&1 || true
done
for r in $(seq 1 "$rounds"); do
  for d in "$old" "$new"; do
    echo "== $d, round $r: tensorfold bench"
    timeout 150 "$d/tensorfold" "${bench[@]}" --streams 1,4,16,64 2>&1 | grep -E '^(decode|prefill)'
    echo "== $d, round $r: tf-cuda-synthetic (tok/s at 1/4/16/64 streams)"
    timeout 200 "$d/tf-cuda-synthetic" --model "$syn" --model lightning --bench 16 2>&1 |
      grep -E '^\| [0-9]|PASS|FAIL'
  done
done
