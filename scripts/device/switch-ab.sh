#!/usr/bin/env bash
# One build, its receipts, then an environment switch timed on and off in the same call (the
# only comparison the device's noise allows), from the repository root on the H200 machine:
#   bash scripts/device/switch-ab.sh VAR [ROUNDS [VALUE...]]
# e.g. VAR=TF_CUDA_SIDE_STREAM (the MoE side streams, docs/perf.md session 12). Needs
# dist/tensorfold, dist/tf-cuda-contract, dist/tf-cuda-nemotron, dist/tf-cuda-muse and
# dist/tf-cuda-synthetic of one build (built here with
#   cargo build --profile ci -p tensorfold -p tf-cuda --bins --examples
# from target/ci/ and target/ci/examples/). VALUEs default to 1 0. First the receipts with VAR
# at the first VALUE (the kernel contract, every Nemotron-H and Muse Spark fixture against the
# CPU engine, every fixture through `tensorfold score`; so an opt-in path is what they check),
# then per round VAR at each VALUE: `tf-cuda-synthetic` at the default model's shape and
# Lightning's (1 / 4 / 16 streams), and Bolt's (1 / 4 / 16 / 64). About 4 minutes for two
# values and ROUNDS=1, the first run compiling the kernels (about 80 s).
set -uo pipefail
var=${1:?usage: switch-ab.sh VAR [ROUNDS [VALUE...]]}
rounds=${2:-1}
values=("${@:3}")
[ ${#values[@]} -gt 0 ] || values=(1 0)
. scripts/device/ab-common.sh
export "$var=${values[0]}"
receipts
unset "$var"
small=(--model "smollm2-135m:q4_1,embed=q8_0,dense=f32" --model lightning --bench 32 --streams 1,4,16)
for r in $(seq 1 "$rounds"); do
  for v in "${values[@]}"; do
    step "small-$var-$v-$r" 90 env "$var=$v" ./dist/tf-cuda-synthetic "${small[@]}"
    grep -E '^# |^\| [0-9]+ \|' "$out/small-$var-$v-$r.log"
    step "bolt-$var-$v-$r" 120 env "$var=$v" ./dist/tf-cuda-synthetic --model bolt --bench 16
    grep -E '^\| [0-9]+ \|' "$out/bolt-$var-$v-$r.log"
  done
done
[ "$fails" = 0 ] && echo "switch-ab: PASS" || echo "switch-ab: FAIL ($fails steps failed)"
[ "$fails" = 0 ]
