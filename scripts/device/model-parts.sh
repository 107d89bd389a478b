#!/usr/bin/env bash
# The default model (98 MB) is larger than what one device call can carry (64 MiB with the
# working tree), so it travels xz-compressed in two parts over two calls made back to back while
# the machine is warm (prepare them here with scripts/device/split-model.sh, which leaves
# part-aa in dist/ and part-ab in .device-parts/):
#   call 1 (carry dist):           bash scripts/device/model-parts.sh stash
#   call 2 (carry .device-parts):  bash scripts/device/model-parts.sh assemble
# stash keeps dist/ (part-aa and the binaries) under /tmp/tfm; assemble adds part-ab, writes
# /tmp/tfm/model.gguf and checks its sha256, and puts the stashed binaries back in dist/.
set -euo pipefail
dir=/tmp/tfm
mkdir -p "$dir"
case "${1:-}" in
  stash)
    cp -p dist/* "$dir"/
    ;;
  assemble)
    cp .device-parts/*.part-* "$dir"/
    cat "$dir"/smol.gguf.xz.part-* | python3 -c 'import lzma, sys, shutil; shutil.copyfileobj(lzma.open(sys.stdin.buffer), sys.stdout.buffer)' > "$dir/model.gguf"
    echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  $dir/model.gguf" | sha256sum -c -
    mkdir -p dist
    for f in "$dir"/tf-cuda-*; do cp -p "$f" dist/; done
    ;;
  *)
    echo "usage: model-parts.sh stash|assemble" >&2
    exit 2
    ;;
esac
