#!/usr/bin/env bash
# llama.cpp's CUDA build on the device machine (the peer of issue 8), then llama-bench on MODEL.
# Run on the device from the repository root; the tarball comes from pack-llamacpp.sh (here):
#
#   bash scripts/device/pack-llamacpp.sh .device-parts/llamacpp            # here, once
#   # device, carry [".device-parts/llamacpp"]:
#   LLAMACPP_BUILD_ONLY=1 bash scripts/device/llamacpp.sh .device-parts/llamacpp/llamacpp-src.tar.xz
#   bash scripts/device/llamacpp.sh .device-parts/llamacpp/llamacpp-src.tar.xz /tmp/tfm/model.gguf
#   (/tmp/tfm/model.gguf: the default model, assembled by model-parts.sh; any GGUF will do)
#
# The first call unpacks to /tmp/llamacpp and builds; a later call on the same (warm) machine
# reuses that build. A build still running LLAMACPP_BUILD_DEADLINE seconds after the start is
# stopped (FAIL, tree kept) and resumes where it stopped when the same command runs again.
# Bench: llama-bench -m MODEL -ngl 99 -fa 1, then -fa 0, each with $LLAMACPP_BENCH_ARGS
# (default "-p 512,2048 -n 128 -r 5"). Results in $OUT/llamacpp/: bench-fa{1,0}.md and .json,
# build.log, info.txt (toolchain, GPU, flags, build time). The last line printed is PASS or
# FAIL; the exit status is 0 only on PASS (2 on bad usage).
#
# Environment (all optional):
#   LLAMACPP_BUILD_ONLY=1      build only; MODEL may be left out
#   LLAMACPP_DIR=/tmp/llamacpp where the sources and build trees live
#   LLAMACPP_JOBS=16           build parallelism
#   LLAMACPP_BUILD_DEADLINE=550 seconds after this script starts by which the build must end
#                              (device calls are killed at 600)
#   LLAMACPP_BENCH_ARGS        llama-bench arguments besides -m, -ngl, -fa and the output formats
#   LLAMACPP_GPU=0             a CPU build (GGML_NATIVE=ON, no nvcc): how the tarball's trimming
#                              is proven on a machine without CUDA (pack-llamacpp.sh PACK_VERIFY=1)
set -uo pipefail

fail() {
  echo "FAIL: $*"
  exit 1
}
usage() {
  echo "usage: [LLAMACPP_BUILD_ONLY=1] $0 TARBALL [MODEL.gguf]   (see the comments at the top)" >&2
  exit 2
}

build_only="${LLAMACPP_BUILD_ONLY:-0}"
gpu="${LLAMACPP_GPU:-1}"
dir="${LLAMACPP_DIR:-/tmp/llamacpp}"
jobs="${LLAMACPP_JOBS:-16}"
build_deadline="${LLAMACPP_BUILD_DEADLINE:-550}"
bench_args="${LLAMACPP_BENCH_ARGS:--p 512,2048 -n 128 -r 5}"
out="${OUT:-/tmp/llamacpp-out}/llamacpp"

for v in build_only gpu; do
  case "${!v}" in 0 | 1) ;; *) echo "error: LLAMACPP_${v^^} must be 0 or 1, not '${!v}'" >&2 && usage ;; esac
done
for v in jobs build_deadline; do
  case "${!v}" in '' | *[!0-9]*) echo "error: LLAMACPP_${v^^} must be a whole number, not '${!v}'" >&2 && usage ;; esac
done

if [ $# -lt 1 ] || [ $# -gt 2 ]; then usage; fi
tarball="$1"
model="${2:-}"
[ -f "$tarball" ] || fail "no tarball at '$tarball' (make it with scripts/device/pack-llamacpp.sh)"
tarball="$(cd "$(dirname "$tarball")" && pwd -P)/$(basename "$tarball")"
if [ "$build_only" = 0 ]; then
  [ -n "$model" ] || fail "no MODEL given (or set LLAMACPP_BUILD_ONLY=1)"
  [ -f "$model" ] || fail "no model file at '$model'"
  [ "$(head -c 4 "$model")" = GGUF ] || fail "'$model' is not a GGUF file (no GGUF magic)"
  model="$(cd "$(dirname "$model")" && pwd -P)/$(basename "$model")"
fi

mkdir -p "$out" || fail "cannot create $out"
log="$out/build.log"
info="$out/info.txt"
: >"$info"
note() { echo "$*" | tee -a "$info"; }

# The toolchain.
# nvcc: on PATH, else /usr/local/cuda/bin, else a versioned /usr/local/cuda-*/bin (newest),
# else the pip toolkit's nvidia/cu*/bin. cmake is pointed at the toolkit that nvcc belongs to.
nvcc_candidates() {
  local py
  echo /usr/local/cuda/bin/nvcc
  printf '%s\n' /usr/local/cuda-*/bin/nvcc | sort -rV
  if py="$(python3 -c 'import nvidia, os; print(list(nvidia.__path__)[0])' 2>/dev/null)"; then
    printf '%s\n' "$py"/cu*/bin/nvcc
  fi
}
if [ "$gpu" = 1 ]; then
  if ! command -v nvcc >/dev/null 2>&1; then
    found="$(nvcc_candidates | while IFS= read -r c; do if [ -x "$c" ]; then echo "$c" && break; fi; done)"
    if [ -n "$found" ]; then
      PATH="$(dirname "$found"):$PATH"
      export PATH
    else
      ls -d /usr/local/cuda* 2>&1
      fail "nvcc is not on PATH, nor in /usr/local/cuda*/bin or the pip toolkit (nvidia/cu*/bin)"
    fi
  fi
  nvcc_path="$(command -v nvcc)"
  cuda_root="$(dirname "$(dirname "$(readlink -f "$nvcc_path")")")"
  note "nvcc: $nvcc_path (toolkit root $cuda_root)"
  cuda_hint=()
  if [ -f "$cuda_root/include/cuda_runtime.h" ]; then cuda_hint=("-DCUDAToolkit_ROOT=$cuda_root"); fi
  nvcc --version 2>&1 | tee -a "$info" || fail "nvcc --version failed"
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee -a "$info"
  fi
fi
command -v cmake >/dev/null 2>&1 || fail "cmake is not on PATH"
note "$(cmake --version | head -n 1)"

# The sources: unpacked once per tarball (same sha256 = same sources = the build is reused).
sha="$(sha256sum "$tarball" | cut -d' ' -f1)" || fail "cannot read $tarball"
note "tarball: $tarball sha256 $sha"
src="$dir/llama.cpp"
if [ -f "$dir/src.sha256" ] && [ "$(cat "$dir/src.sha256")" = "$sha" ] && [ -f "$src/CMakeLists.txt" ]; then
  echo "reusing the sources in $src"
else
  echo "unpacking to $dir"
  rm -rf "$src" "$dir/build-cuda" "$dir/build-cpu" "$dir/src.sha256"
  mkdir -p "$dir" || fail "cannot create $dir"
  tar -xJf "$tarball" -C "$dir" || fail "cannot unpack $tarball into $dir"
  echo "$sha" >"$dir/src.sha256"
fi
if [ -f "$src/PEER-COMMIT" ]; then
  note "source: $(head -n 1 "$src/PEER-COMMIT")"
fi

# Configure: only what llama-bench needs (no tests, examples, server, app, openssl; this
# llama.cpp has no curl dependency left, LLAMA_CURL is deprecated), and nothing that downloads
# at configure time (the device has no network: LLGUIDANCE and CUB_3DOT2 would fetch from git).
flags=(
  -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_CCACHE=OFF
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF
  -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_OPENSSL=OFF -DLLAMA_LLGUIDANCE=OFF
  -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF
)
if [ "$gpu" = 1 ]; then
  build="$dir/build-cuda"
  flags+=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF -DGGML_CUDA_NCCL=OFF
    -DGGML_CUDA_CUB_3DOT2=OFF "-DCMAKE_CUDA_COMPILER=$nvcc_path" "${cuda_hint[@]}")
else
  build="$dir/build-cpu"
  flags+=(-DGGML_CUDA=OFF -DGGML_NATIVE=ON)
fi
if [ ! -f "$build/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1; then
  flags+=(-G Ninja)
fi
note "cmake flags: ${flags[*]}"

tail_log() {
  echo "---- last 40 lines of $log ----"
  tail -n 40 "$log"
  echo "----"
}
t0=$SECONDS
echo "configuring (log: $log)"
if ! cmake -S "$src" -B "$build" "${flags[@]}" >>"$log" 2>&1; then
  tail_log
  fail "cmake configure failed"
fi
t1=$SECONDS
budget=$((build_deadline - SECONDS))
[ "$budget" -gt 0 ] || fail "no time left for the build (LLAMACPP_BUILD_DEADLINE=$build_deadline)"
echo "building llama-bench with -j $jobs (stopped after ${budget}s if not done)"
# timeout runs the build in a process group of its own; if this script is stopped, pass the
# signal on so no compiler outlives the call. Should one survive anyway (SIGKILL), the lock
# makes the next call wait for it rather than build the same tree twice at once.
lock=()
if command -v flock >/dev/null 2>&1; then lock=(flock "$dir/build.lock"); fi
timeout "$budget" "${lock[@]}" cmake --build "$build" -j "$jobs" --target llama-bench >>"$log" 2>&1 &
build_pid=$!
trap 'kill -TERM "$build_pid" 2>/dev/null; wait "$build_pid"; fail "interrupted during the build"' TERM INT HUP
wait "$build_pid"
rc=$?
trap - TERM INT HUP
t2=$SECONDS
# Files that come back from the device are capped at 16 MiB each: keep the log's last 12 MiB.
if [ "$(stat -c %s "$log")" -gt $((12 * 1024 * 1024)) ]; then
  tail -c $((12 * 1024 * 1024)) "$log" >"$log.tail" && mv "$log.tail" "$log"
fi
if [ "$rc" = 124 ]; then
  tail -n 5 "$log"
  fail "build not finished after ${budget}s; $build is kept: run the same command again on this warm machine to resume"
elif [ "$rc" != 0 ]; then
  tail_log
  fail "build failed (exit $rc)"
fi
bin="$build/bin/llama-bench"
[ -x "$bin" ] || fail "build ended but $bin is missing"
note "build time: configure $((t1 - t0))s, build $((t2 - t1))s (a few seconds: a reused build)"

if [ "$build_only" = 1 ]; then
  echo "llama-bench built: $bin"
  echo "PASS"
  exit 0
fi

# Bench: flash attention on, then off. JSON on stdout, the markdown table on stderr.
read -r -a bench <<<"$bench_args"
failed=0
for fa in 1 0; do
  md="$out/bench-fa$fa.md"
  json="$out/bench-fa$fa.json"
  echo "== llama-bench -m $model -ngl 99 -fa $fa ${bench[*]}"
  "$bin" -m "$model" -ngl 99 -fa "$fa" "${bench[@]}" -o json -oe md >"$json" 2>"$md"
  rc=$?
  cat "$md"
  if [ "$rc" != 0 ]; then
    echo "llama-bench -fa $fa exited $rc"
    failed=1
  elif ! grep -q '"avg_ts"' "$json"; then
    echo "llama-bench -fa $fa wrote no results to $json"
    failed=1
  fi
done
[ "$failed" = 0 ] || fail "llama-bench failed (outputs in $out)"
echo "outputs: $out"
echo "PASS"
