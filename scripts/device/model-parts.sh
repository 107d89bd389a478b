#!/usr/bin/env bash
# The default model (98 MB) is larger than what one device call can carry (64 MiB with the
# working tree), so it travels xz-compressed in parts over calls made back to back while the
# machine is warm (prepare them here with scripts/device/split-model.sh MODEL N, which leaves
# part i in .device-parts/i/). Binaries built here can ride along in any of those folders.
#   each call (carry .device-parts/i):  bash scripts/device/model-parts.sh stash .device-parts/i
#   the last call, after its stash:     bash scripts/device/model-parts.sh assemble
# stash keeps the folder's files under /tmp/tfm; assemble joins the parts into
# /tmp/tfm/model.gguf, checks its sha256, and copies every stashed binary into dist/.
set -euo pipefail
dir=/tmp/tfm
mkdir -p "$dir"
case "${1:-}" in
  stash)
    shift
    for d in "$@"; do cp -p "$d"/* "$dir"/; done
    ;;
  assemble)
    cat "$dir"/smol.gguf.xz.part-* | python3 -c 'import lzma, sys, shutil; shutil.copyfileobj(lzma.open(sys.stdin.buffer), sys.stdout.buffer)' > "$dir/model.gguf"
    echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  $dir/model.gguf" | sha256sum -c -
    mkdir -p dist
    for f in "$dir"/*; do
      case "$f" in *.part-*|*/model.gguf) ;; *) cp -p "$f" dist/ ;; esac
    done
    ;;
  *)
    echo "usage: model-parts.sh stash DIR... | assemble" >&2
    exit 2
    ;;
esac
