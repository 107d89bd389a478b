#!/usr/bin/env bash
# One build's one-stream decode with and without an environment switch, alternated in one call
# (the only comparison the device's noise allows), from the repository root on the GPU machine:
#   bash scripts/device/env-ab.sh ROUNDS MODEL BENCH VAR=VALUE
# e.g. `bash scripts/device/env-ab.sh 3 bolt 16 TF_CUDA_MMA_B16=1`. Per round: dist/'s
# `tf-cuda-synthetic --model MODEL --bench BENCH --streams 1` plain, then with VAR=VALUE. The
# quick form of switch-ab.sh (which also runs the receipts and three models at up to 64 streams,
# some 4 minutes a round) for calls with little device time: run the switch's receipts first
# (ab-common.sh: receipts, under the same VAR=VALUE).
set -uo pipefail
rounds=${1:?usage: env-ab.sh ROUNDS MODEL BENCH VAR=VALUE}
model=${2:?} bench=${3:?} switch=${4:?}
. scripts/device/ab-common.sh
for r in $(seq 1 "$rounds"); do
  for with in plain "$switch"; do
    name="$model-${with%%=*}-$r"
    if [ "$with" = plain ]; then
      step "$name" 120 ./dist/tf-cuda-synthetic --model "$model" --bench "$bench" --streams 1
    else
      step "$name" 120 env "$with" ./dist/tf-cuda-synthetic --model "$model" --bench "$bench" --streams 1
    fi
    echo "$with, round $r: $(grep -E '^\| [0-9]+ \|' "$out/$name.log")"
  done
done
[ "$fails" = 0 ]
