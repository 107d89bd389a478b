# Sourced by the device scripts on the H200 machine: finds libnvrtc (the CUDA toolkit's, else
# the pip package nvidia-cuda-nvrtc's) and puts it on LD_LIBRARY_PATH; libcuda comes from the
# driver; puts the programs compiled and assembled ahead here (dist/ptx-cache,
# scripts/device/ptx-cache.sh) into the kernel cache. Keeps NVLink multicast off (KINDS.md).
export NCCL_NVLS_ENABLE=0
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
    "$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))' 2>/dev/null)"; do
  if [ -n "$d" ] && ls "$d"/libnvrtc.so* >/dev/null 2>&1; then
    export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "libnvrtc from $d"
    break
  fi
done
export TF_CUDA_CACHE="${TF_CUDA_CACHE:-/tmp/tf-cuda-cache}"
if ls dist/ptx-cache/*.gz >/dev/null 2>&1; then
  mkdir -p "$TF_CUDA_CACHE"
  for f in dist/ptx-cache/*.gz; do
    t="$TF_CUDA_CACHE/$(basename "$f" .gz)"
    [ -e "$t" ] || { gunzip -c "$f" >"$t.$$" && mv "$t.$$" "$t"; }
  done
fi
