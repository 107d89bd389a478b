#!/usr/bin/env bash
# One build's one-stream decode plain and under environment switches, alternated in one call
# (the only comparison the device's noise allows), from the repository root on the GPU machine:
#   bash scripts/device/env-ab.sh ROUNDS MODEL BENCH SETTING...
# e.g. `bash scripts/device/env-ab.sh 3 bolt 16 TF_CUDA_MMA_B16=1 "A=1 B=2" base`. Per round:
# dist/'s `tf-cuda-synthetic --model MODEL --bench BENCH --streams 1` plain, then under each
# SETTING (one or more VAR=VALUE, space-separated), or `base`: dist-base/'s build plain (its
# program in dist/ptx-cache too). The quick form of switch-ab.sh (which also runs the receipts
# and three models at up to 64 streams, some 4 minutes a round) for calls with little device
# time: run the switches' receipts first (ab-common.sh: receipts, under the same settings).
set -uo pipefail
rounds=${1:?usage: env-ab.sh ROUNDS MODEL BENCH SETTING...}
model=${2:?} bench=${3:?}
shift 3
[ $# -ge 1 ] || { echo "env-ab.sh: no SETTING" >&2; exit 2; }
. scripts/device/ab-common.sh
for r in $(seq 1 "$rounds"); do
  for with in plain "$@"; do
    name="$model-$(echo "$with" | tr -c 'A-Za-z0-9\n' '_')-$r"
    case "$with" in
      plain) cmd=(./dist/tf-cuda-synthetic) ;;
      base) cmd=(./dist-base/tf-cuda-synthetic) ;;
      *) read -ra vars <<<"$with"; cmd=(env "${vars[@]}" ./dist/tf-cuda-synthetic) ;;
    esac
    step "$name" 120 "${cmd[@]}" --model "$model" --bench "$bench" --streams 1
    echo "$with, round $r: $(grep -E '^\| [0-9]+ \|' "$out/$name.log")"
  done
done
[ "$fails" = 0 ]
