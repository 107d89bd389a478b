#!/usr/bin/env bash
# Here (not on the device): compresses the default model and splits it into two parts under
# .device-parts/ (git-ignored through .git/info/exclude) for scripts/device/model-parts.sh.
set -euo pipefail
model="${1:?usage: split-model.sh MODEL.gguf}"
mkdir -p .device-parts
xz -6 -T2 -c "$model" > .device-parts/smol.gguf.xz
size=$(stat -c %s .device-parts/smol.gguf.xz)
split -b $(( (size + 1) / 2 )) .device-parts/smol.gguf.xz .device-parts/smol.gguf.xz.part-
mv .device-parts/smol.gguf.xz.part-aa dist/
rm .device-parts/smol.gguf.xz
ls -la .device-parts
