#!/usr/bin/env bash
# Here (not on the device): compresses the default model and splits it into N parts (default 3),
# part i in .device-parts/i/ (git-ignored through .git/info/exclude), for
# scripts/device/model-parts.sh.
set -euo pipefail
model="${1:?usage: split-model.sh MODEL.gguf [N]}"
n="${2:-3}"
mkdir -p .device-parts
xz -6 -T2 -c "$model" > .device-parts/smol.gguf.xz
size=$(stat -c %s .device-parts/smol.gguf.xz)
split -n $n .device-parts/smol.gguf.xz .device-parts/smol.gguf.xz.part-
rm .device-parts/smol.gguf.xz
i=1
for p in .device-parts/smol.gguf.xz.part-*; do
  mkdir -p .device-parts/$i
  mv "$p" .device-parts/$i/
  i=$((i + 1))
done
ls -la .device-parts/*
