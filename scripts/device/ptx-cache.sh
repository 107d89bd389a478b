#!/usr/bin/env bash
# Run here (no GPU needed), before a device call: compiles the kernel program with the NVRTC the
# GPU machine has (the pip package nvidia-cuda-nvrtc==13.0.88; the cache key holds NVRTC's
# major and minor version) and leaves it gzipped in dist/ptx-cache. On the GPU machine env.sh
# puts it into the kernel cache, so a fresh machine's first run skips the compile.
#   bash scripts/device/ptx-cache.sh [TREE]
# TREE: another checkout whose program to add (e.g. a base build's git worktree).
set -euo pipefail
cd "$(dirname "$0")/../.."
dest="$PWD/dist/ptx-cache"
tree="${1:-$PWD}"
ver=$(python3 -m pip show nvidia-cuda-nvrtc 2>/dev/null | awk '/^Version/ {print $2}')
if [ "$ver" != 13.0.88 ]; then
  echo "needs nvidia-cuda-nvrtc==13.0.88 from pip (found ${ver:-none})" >&2
  exit 1
fi
lib=$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))')
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tree" && LD_LIBRARY_PATH="$lib" TF_CUDA_CACHE="$tmp" \
  cargo run -q --profile ci -p tf-cuda --example dump_ptx -- --cache)
mkdir -p "$dest"
for f in "$tmp"/*.ptx; do gzip -c "$f" >"$dest/$(basename "$f").gz"; done
ls -la "$dest"
