#!/usr/bin/env bash
# Every fixture of the three families (MLX-quantized and float forms): `tensorfold score
# --backend cuda` must write the same bytes as `--backend cpu`, on the H200 machine:
#   bash scripts/device/fixtures.sh     (needs dist/tensorfold; no model download)
# Prints PASS / FAIL per fixture (REFUSED where the CPU refuses it too) and exits 1 if any
# comparison failed or the GPU refused what the CPU scored.
set -uo pipefail
. scripts/device/env.sh >/dev/null
T=./dist/tensorfold
work=$(mktemp -d)
fails=0
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
    if $T score "$fx" --backend cuda --tokens "$work/fx.json" --mode $mode --out "$work/fx-gpu.st" 2>"$work/fx.err"; then
      if cmp -s "$work/fx-cpu.st" "$work/fx-gpu.st"; then
        echo "PASS fixture $name ($mode): GPU logits == CPU logits"
      else
        echo "FAIL fixture $name ($mode): GPU logits == CPU logits"; fails=$((fails + 1))
      fi
    else
      # The CPU scored it, so a GPU refusal is a failure.
      echo "FAIL fixture $name ($mode): the GPU refused what the CPU scored: $(tail -1 "$work/fx.err")"
      fails=$((fails + 1))
    fi
  done
done
[ "$fails" -eq 0 ]
