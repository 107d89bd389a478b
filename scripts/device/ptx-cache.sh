#!/usr/bin/env bash
# Run here (no GPU needed), before a device call: compiles the kernel program with the NVRTC the
# GPU machine has and assembles it for sm_90 with ptxas of the same release (both 13.0.88,
# scripts/cuda-tools.sh), and leaves both compressed in dist/ptx-cache. On the GPU machine
# env.sh puts them into the kernel cache, so a fresh machine's first run neither compiles nor
# translates the program (src/compile.rs: program_cubin). xz, not gzip: a program takes some
# 2.3 MB, not 6.5, so a call can carry several beside the binaries (64 MiB in all).
#   bash scripts/device/ptx-cache.sh [TREE]
# TREE: another checkout whose program to add (e.g. a base build's git worktree).
set -euo pipefail
cd "$(dirname "$0")/../.."
dest="$PWD/dist/ptx-cache"
tree="${1:-$PWD}"
. scripts/cuda-tools.sh
cuda_tools_fetch
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tree" && LD_LIBRARY_PATH="$cuda_nvrtc_lib" TF_CUDA_CACHE="$tmp" \
  cargo run -q --profile ci -p tf-cuda --example dump_ptx -- --cache)
mkdir -p "$dest"
for f in "$tmp"/*.ptx; do
  "$cuda_bin/ptxas" -arch=sm_90 "$f" -o "${f%.ptx}.sm_90.cubin"
  xz -6 -c "$f" >"$dest/$(basename "$f").xz"
  xz -6 -c "${f%.ptx}.sm_90.cubin" >"$dest/$(basename "${f%.ptx}").sm_90.cubin.xz"
done
ls -la "$dest"
