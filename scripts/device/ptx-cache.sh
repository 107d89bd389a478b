#!/usr/bin/env bash
# Run here (no GPU needed), before a device call: compiles the kernel program with the NVRTC the
# GPU machine has (the pip package nvidia-cuda-nvrtc==13.0.88; the cache key holds NVRTC's
# major and minor version), assembles it for sm_90 with ptxas of the same release (the pip
# wheel nvidia-cuda-nvcc==13.0.88, unpacked once into $TF_PTXAS_TOOLS, default
# ~/.cache/tensorfold-ptxas-13.0), and leaves both gzipped in dist/ptx-cache. On the GPU machine
# env.sh puts them into the kernel cache, so a fresh machine's first run neither compiles nor
# translates the program (src/compile.rs: program_cubin).
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
tools="${TF_PTXAS_TOOLS:-$HOME/.cache/tensorfold-ptxas-13.0}"
ptxas="$tools/nvidia/cu13/bin/ptxas"
if [ ! -x "$ptxas" ]; then
  python3 -m pip download -q --no-deps -d "$tools/wheels" nvidia-cuda-nvcc==13.0.88
  python3 -m zipfile -e "$tools"/wheels/nvidia_cuda_nvcc-13.0.88-*.whl "$tools"
  chmod +x "$tools"/nvidia/cu13/bin/*
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tree" && LD_LIBRARY_PATH="$lib" TF_CUDA_CACHE="$tmp" \
  cargo run -q --profile ci -p tf-cuda --example dump_ptx -- --cache)
mkdir -p "$dest"
for f in "$tmp"/*.ptx; do
  "$ptxas" -arch=sm_90 "$f" -o "${f%.ptx}.sm_90.cubin"
  gzip -c "$f" >"$dest/$(basename "$f").gz"
  gzip -c "${f%.ptx}.sm_90.cubin" >"$dest/$(basename "${f%.ptx}").sm_90.cubin.gz"
done
ls -la "$dest"
