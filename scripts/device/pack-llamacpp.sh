#!/usr/bin/env bash
# Packs the llama.cpp CUDA peer's sources for the device machine (issue 8: our GPU decode
# against llama.cpp's CUDA build on the same GPU). Run here, not on the device:
#
#   bash scripts/device/pack-llamacpp.sh OUTDIR [SRC]
#       OUTDIR  where llamacpp-src.tar.xz goes; use .device-parts/llamacpp (git-excluded)
#       SRC     llama.cpp tree, default /work/peers/llama_cpp_python-0.3.36/vendor/llama.cpp
#               (the `llama-cpp-python==0.3.36` sdist, unpacked; docs/fidelity.md says how)
#   PACK_VERIFY=1 bash scripts/device/pack-llamacpp.sh OUTDIR
#       also proves the trimming: unpacks the tarball and builds llama-bench from it on the CPU
#       here (scripts/device/llamacpp.sh with LLAMACPP_GPU=0; -j2, GGML_NATIVE=ON; 742 s on the
#       2-core VM, 2026-11-30).
#
# The tarball holds vendor/llama.cpp minus everything a `llama-bench` build does not read:
# models, docs, tests, examples, media, python, the web UI and server, a stale build/, and every
# ggml backend except CPU and CUDA. Nothing from it is committed. Then on the device:
#   LLAMACPP_BUILD_ONLY=1 bash scripts/device/llamacpp.sh .device-parts/llamacpp/llamacpp-src.tar.xz
#   bash scripts/device/llamacpp.sh .device-parts/llamacpp/llamacpp-src.tar.xz /tmp/tfm/model.gguf
# (carry [".device-parts/llamacpp"]; llamacpp.sh says more).
set -euo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 OUTDIR [SRC]   (see the comments at the top)" >&2
  exit 2
fi
outdir="$1"
src="${2:-/work/peers/llama_cpp_python-0.3.36/vendor/llama.cpp}"
src="$(cd "$src" 2>/dev/null && pwd -P)" || { echo "FAIL: no folder ${2:-}" >&2; exit 1; }
for f in CMakeLists.txt tools/llama-bench/llama-bench.cpp ggml/src/ggml-cuda/ggml-cuda.cu; do
  if [ ! -f "$src/$f" ]; then
    echo "FAIL: $src is not a llama.cpp tree (no $f)" >&2
    exit 1
  fi
done

# Paths relative to the tree's root, dropped from the copy. Every tools/* subfolder that
# tools/CMakeLists.txt adds unconditionally stays (cmake needs them to configure), and so do
# vendor/* (vendor/CMakeLists.txt adds them all).
excludes=(
  './.[!.]*'                       # .github, .devops, dot files
  ./build ./build-*                # stale build trees
  ./models ./docs ./media ./tests ./benches ./examples ./pocs ./app ./skills
  ./gguf-py ./conversion ./requirements ./requirements.txt ./scripts ./ci ./grammars
  './*.py' './*.nix' ./pyproject.toml ./poetry.lock ./mypy.ini ./pyrightconfig.json ./ty.toml
  ./Makefile ./build-xcframework.sh
  ./tools/ui ./tools/server ./tools/cli      # only with LLAMA_BUILD_SERVER
  ./tools/mtmd/tests ./tools/mtmd/test-1.jpeg ./tools/mtmd/test-2.mp3 ./tools/mtmd/test-3.mp4
  ./ggml/src/ggml-blas ./ggml/src/ggml-cann ./ggml/src/ggml-et ./ggml/src/ggml-hexagon
  ./ggml/src/ggml-hip ./ggml/src/ggml-metal ./ggml/src/ggml-musa ./ggml/src/ggml-opencl
  ./ggml/src/ggml-openvino ./ggml/src/ggml-rpc ./ggml/src/ggml-sycl ./ggml/src/ggml-virtgpu
  ./ggml/src/ggml-vulkan ./ggml/src/ggml-webgpu ./ggml/src/ggml-zdnn ./ggml/src/ggml-zendnn
  '*/__pycache__' '*.pyc'
)
tar_excludes=()
for e in "${excludes[@]}"; do tar_excludes+=("--exclude=$e"); done

mkdir -p "$outdir"
out="$(cd "$outdir" && pwd -P)/llamacpp-src.tar.xz"
tmp="$out.partial"
# The build's own version stamp needs the tree's git metadata, which is left out; so the commit
# travels as PEER-COMMIT (llamacpp.sh prints it).
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
commit="$(git -C "$src" log -1 --format='%h %cs %s' 2>/dev/null || echo unknown)"
printf '%s\n' "llama.cpp $commit" "from $src" >"$stage/PEER-COMMIT"
# Reproducible: sorted names, fixed owner and mtime; the top folder is llama.cpp/.
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime='2026-01-01 00:00Z' \
  "${tar_excludes[@]}" --transform 's,^\.,llama.cpp,' \
  -C "$src" -cf - . -C "$stage" ./PEER-COMMIT | xz -9 -T2 >"$tmp"
mv "$tmp" "$out"

size=$(stat -c %s "$out")
sha=$(sha256sum "$out" | cut -d' ' -f1)
files=$(tar -tJf "$out" | grep -vc '/$')
echo "tarball: $out"
echo "source:  llama.cpp $commit"
echo "size:    $size bytes ($((size / 1024 / 1024)) MiB), $files files"
echo "sha256:  $sha"
if [ "$size" -ge $((20 * 1024 * 1024)) ]; then
  echo "FAIL: tarball is 20 MiB or more; trim further" >&2
  exit 1
fi

if [ "${PACK_VERIFY:-0}" = 1 ]; then
  here="$(cd "$(dirname "$0")" && pwd -P)"
  echo "verifying: CPU build of llama-bench from the tarball (LLAMACPP_GPU=0)"
  LLAMACPP_GPU=0 LLAMACPP_BUILD_ONLY=1 LLAMACPP_JOBS="${LLAMACPP_JOBS:-2}" \
    LLAMACPP_BUILD_DEADLINE="${LLAMACPP_BUILD_DEADLINE:-7200}" \
    LLAMACPP_DIR="${LLAMACPP_DIR:-/tmp/llamacpp-verify}" OUT="${OUT:-/tmp/llamacpp-verify-out}" \
    bash "$here/llamacpp.sh" "$out"
fi
