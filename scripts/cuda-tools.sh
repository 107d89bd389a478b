# Sourced by scripts/sass.sh and scripts/device/ptx-cache.sh (no GPU needed): the CUDA tools
# that read or prepare the program here, from pip wheels unpacked once into $TF_CUDA_TOOLS
# (default ~/.cache/tensorfold-cuda-tools); nothing is installed system-wide.
# - NVRTC and ptxas at 13.0.88: the GPU machine's driver is CUDA 13.0 (../shared/notes/
#   cuda-device.md), NVRTC's major and minor version are part of the kernel cache's key, and
#   the SASS read here is then the SASS that machine runs. NVRTC is the pip package
#   nvidia-cuda-nvrtc==13.0.88 of this machine's python3.
# - cuobjdump and nvdisasm, the newest: they only list a cubin (none is published at 13.0).
# Sets cuda_bin (ptxas, cuobjdump, nvdisasm) and cuda_nvrtc_lib (for LD_LIBRARY_PATH).
cuda_tools="${TF_CUDA_TOOLS:-$HOME/.cache/tensorfold-cuda-tools}"
cuda_bin="$cuda_tools/nvidia/cu13/bin"
cuda_nvrtc_ver=$(python3 -m pip show nvidia-cuda-nvrtc 2>/dev/null | awk '/^Version/ {print $2}')
if [ "$cuda_nvrtc_ver" != 13.0.88 ]; then
  echo "needs nvidia-cuda-nvrtc==13.0.88 from pip (found ${cuda_nvrtc_ver:-none})" >&2
  exit 1
fi
cuda_nvrtc_lib=$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))')
# cuda_tools_fetch [listers]: ptxas, and with `listers` cuobjdump and nvdisasm too.
cuda_tools_fetch() {
  local wheels=()
  [ -x "$cuda_bin/ptxas" ] || wheels+=(nvidia-cuda-nvcc==13.0.88)
  if [ "${1:-}" = listers ]; then
    [ -x "$cuda_bin/cuobjdump" ] || wheels+=(nvidia-cuda-cuobjdump)
    [ -x "$cuda_bin/nvdisasm" ] || wheels+=(nvidia-cuda-nvdisasm)
  fi
  [ ${#wheels[@]} -gt 0 ] || return 0
  echo "fetching ${wheels[*]} (pip wheels) into $cuda_tools" >&2
  python3 -m pip download -q --no-deps -d "$cuda_tools/wheels" "${wheels[@]}"
  for w in "$cuda_tools"/wheels/*.whl; do python3 -m zipfile -e "$w" "$cuda_tools"; done
  chmod +x "$cuda_bin"/*
}
