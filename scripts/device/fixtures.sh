#!/usr/bin/env bash
# Every fixture of the three families (MLX-quantized and float forms): `tensorfold score
# --backend cuda` must write the same bytes as `--backend cpu`, on the H200 machine:
#   bash scripts/device/fixtures.sh     (needs dist/tensorfold; no model download)
# Prints PASS / FAIL / REFUSED per fixture and exits 1 if any comparison failed.
set -uo pipefail
. scripts/device/env.sh >/dev/null
T=./dist/tensorfold
work=$(mktemp -d)
fails=0
echo '[1, 5, 9, 2, 7, 3, 11, 4, 8, 6, 12, 10, 13, 2, 5, 14, 1, 9]' > "$work/fx.json"
for fx in fixtures/llama/*/*/ fixtures/nemotron_h/*/*/ fixtures/muse_spark/*/; do
  [ -f "$fx/config.json" ] || continue
  name=$(echo "$fx" | cut -d/ -f2-4)
  $T score "$fx" --backend cpu --tokens "$work/fx.json" --mode chunk:4 --out "$work/fx-cpu.st" 2>/dev/null
  if $T score "$fx" --backend cuda --tokens "$work/fx.json" --mode full --out "$work/fx-gpu.st" 2>"$work/fx.err"; then
    if cmp -s "$work/fx-cpu.st" "$work/fx-gpu.st"; then
      echo "PASS fixture $name: GPU logits == CPU logits"
    else
      echo "FAIL fixture $name: GPU logits == CPU logits"; fails=$((fails + 1))
    fi
  else
    echo "REFUSED fixture $name: $(tail -1 "$work/fx.err")"
  fi
done
[ "$fails" -eq 0 ]
