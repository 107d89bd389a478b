#!/usr/bin/env bash
# Every fixture of the three families (MLX-quantized and float forms): `tensorfold score
# --backend cuda` must write the same bytes as `--backend cpu`, on the H200 machine:
#   bash scripts/device/fixtures.sh     (needs dist/tensorfold; no model download)
# except the fixtures whose Nemotron-H / Muse Spark matmuls take tf_slices (MLX 4-bit and bf16
# matrices: the GPU's own order, docs/kernels.md): their GPU logits must have every top-1 of the
# CPU's and max |dlogit| <= 1e-3 (slices::FIDELITY_TOLERANCE; python3 with numpy and
# safetensors, as the device has; logits moved by 2e-3 must fail that check, a planted control),
# and the GPU's own two modes must agree bit for bit.
# Prints PASS / FAIL per fixture (REFUSED where the CPU refuses it too) and exits 1 if any
# comparison failed or the GPU refused what the CPU scored.
set -uo pipefail
. scripts/device/env.sh >/dev/null
T=./dist/tensorfold
work=$(mktemp -d)
fails=0
# The fixtures of tf_slices (GPU order) and the fidelity check of their logits.
own_order() { case "$1" in nemotron_h/*/q4g64 | muse_spark/mlx-4bit* | muse_spark/mlx-f32*) return 0 ;; esac; return 1; }
fidelity() {
  python3 - "$1" "$2" <<'PY'
import sys
import numpy as np
from safetensors.numpy import load_file
a, b = (next(iter(load_file(p).values())).astype(np.float64) for p in sys.argv[1:3])
a, b = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])
d = float(np.abs(a - b).max())
top1 = int((a.argmax(-1) == b.argmax(-1)).sum())
pa = np.exp(a - a.max(-1, keepdims=True)); pa /= pa.sum(-1, keepdims=True)
lb = b - b.max(-1, keepdims=True); lb -= np.log(np.exp(lb).sum(-1, keepdims=True))
kl = float((pa * (np.log(pa) - lb)).sum(-1).max())
print(f"max |dlogit| {d:.3e}, top-1 {top1}/{len(a)}, max KL(cpu||gpu) {kl:.3e}")
sys.exit(0 if d <= 1e-3 and top1 == len(a) else 1)
PY
}
# A copy of a logits file with every logit moved by 2e-3 (the fidelity check's planted control).
shift_logits() {
  python3 - "$1" "$2" <<'PY'
import sys
import numpy as np
from safetensors.numpy import load_file, save_file
t = load_file(sys.argv[1])
save_file({k: v + np.float32(2e-3) for k, v in t.items()}, sys.argv[2])
PY
}
# 40 tokens: one GPU round of 40 rows takes the tiled matmuls (from 12 rows) as well; the GPU
# also scores them serially (one row a round: the decode kernels).
echo '[1, 5, 9, 2, 7, 3, 11, 4, 8, 6, 12, 10, 13, 2, 5, 14, 1, 9, 3, 8, 2, 12, 6, 1, 10, 4, 13, 7, 11, 5, 9, 14, 2, 6, 3, 12, 8, 1, 10, 7]' > "$work/fx.json"
for fx in fixtures/llama/*/*/ fixtures/nemotron_h/*/*/ fixtures/muse_spark/*/; do
  [ -f "$fx/config.json" ] || continue
  name=$(echo "$fx" | cut -d/ -f2-4)
  if ! $T score "$fx" --backend cpu --tokens "$work/fx.json" --mode chunk:4 --out "$work/fx-cpu.st" 2>"$work/fx.err"; then
    echo "REFUSED fixture $name (by the CPU too): $(tail -1 "$work/fx.err")"
    continue
  fi
  for mode in full serial; do
    f=""
    if $T score "$fx" --backend cuda --tokens "$work/fx.json" --mode $mode --out "$work/fx-gpu-$mode.st" 2>"$work/fx.err"; then
      if cmp -s "$work/fx-cpu.st" "$work/fx-gpu-$mode.st"; then
        echo "PASS fixture $name ($mode): GPU logits == CPU logits"
      elif own_order "$name" && f=$(fidelity "$work/fx-cpu.st" "$work/fx-gpu-$mode.st"); then
        echo "PASS fixture $name ($mode): GPU order, $f"
        # Planted control: the same logits moved by 2e-3 must fail the fidelity check.
        shift_logits "$work/fx-gpu-$mode.st" "$work/fx-planted.st"
        if fidelity "$work/fx-cpu.st" "$work/fx-planted.st" >/dev/null; then
          echo "FAIL fixture $name ($mode): logits moved by 2e-3 passed the fidelity check"; fails=$((fails + 1))
        fi
      else
        echo "FAIL fixture $name ($mode): GPU logits == CPU logits ${f:-}"; fails=$((fails + 1))
      fi
    else
      # The CPU scored it, so a GPU refusal is a failure.
      echo "FAIL fixture $name ($mode): the GPU refused what the CPU scored: $(tail -1 "$work/fx.err")"
      fails=$((fails + 1))
    fi
  done
  if [ -f "$work/fx-gpu-full.st" ] && [ -f "$work/fx-gpu-serial.st" ]; then
    if cmp -s "$work/fx-gpu-full.st" "$work/fx-gpu-serial.st"; then
      echo "PASS fixture $name: GPU full == GPU serial"
    else
      echo "FAIL fixture $name: GPU full == GPU serial"; fails=$((fails + 1))
    fi
  fi
  rm -f "$work"/fx-gpu-*.st
done
[ "$fails" -eq 0 ]
