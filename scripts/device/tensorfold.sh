#!/usr/bin/env bash
# The tensorfold binary on the GPU (H200 machine): `--backend cuda` through the engine, checked
# against `--backend cpu` on the same machine, then the receipts (their own servers start with
# the default backend, auto = cuda there) and speed.
#   bash scripts/device/tensorfold.sh [MODEL]   (default /tmp/tfm/model.gguf from model-parts.sh;
#   needs dist/tensorfold, built here with
#   cargo build --profile ci -p tensorfold && cp target/ci/tensorfold dist/)
# Prints one PASS/FAIL line per check and exits 1 if any failed.
set -uo pipefail
. scripts/device/env.sh
model="${1:-/tmp/tfm/model.gguf}"
T=./dist/tensorfold
out="${OUT:-/tmp}"
work=$(mktemp -d)
fails=0
check() { # name, command...
  local name=$1; shift
  if "$@"; then echo "PASS $name"; else echo "FAIL $name"; fails=$((fails + 1)); fi
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

# 1. A reply on the GPU.
check "run --backend cuda" $T run "$model" --backend cuda --raw --prompt "The capital of France is" --max-tokens 12

# 2. GPU logits == CPU logits (teacher-forced, every position), in three feeding modes.
toks=fixtures/fidelity/tokens.json
$T score "$model" --backend cpu --tokens $toks --mode chunk:64 --out "$work/cpu.st" 2>/dev/null
for mode in full serial chunk:7 chunk:64; do
  $T score "$model" --backend cuda --tokens $toks --mode $mode --out "$work/gpu-$mode.st" 2>/dev/null
  check "score $mode: GPU logits == CPU logits (bytes)" cmp -s "$work/cpu.st" "$work/gpu-$mode.st"
done

# 3. The same on every fixture of the three families (scripts/device/fixtures.sh).
bash scripts/device/fixtures.sh || fails=$((fails + 1))

# 4. Receipts through servers on the GPU, and the planted crosstalk control (must fail).
check "receipts concurrency (cuda)" $T receipts concurrency "$model"
if $T receipts concurrency "$model" --streams 2 --planted-crosstalk >/dev/null 2>&1; then
  echo "FAIL planted crosstalk was not caught"; fails=$((fails + 1))
else
  echo "PASS planted crosstalk caught (exit non-zero)"
fi
check "receipts resume (cuda)" $T receipts resume "$model"
check "receipts drafts (cuda)" $T receipts drafts "$model"

# 5. Speed: prefill at 2k and 8k prompts, decode at 1/4/16/64 streams; then a synthetic
# Lightning-shaped checkpoint through the same CLI.
$T bench "$model" --backend cuda --prompt-tokens 2048 --gen-tokens 128 --repeat 3 --streams 1,4,16,64 --json | tee "$out/bench-2k.txt"
$T bench "$model" --backend cuda --prompt-tokens 8000 --gen-tokens 128 --repeat 2 --json | tee "$out/bench-8k.txt"

$T bench --synthetic lightning --prompt-tokens 256 --gen-tokens 32 --repeat 1 --streams 1,4,16,64 --json | tee "$out/bench-lightning.txt"

echo "failed checks: $fails"
[ "$fails" -eq 0 ]
