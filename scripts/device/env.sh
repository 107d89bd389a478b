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
# xz (ptx-cache.sh's) or gzip (older builds'); Python's lzma where the machine lacks xz.
tf_unpack() {
  case "$1" in
    *.gz) gunzip -c "$1" ;;
    *.xz) if command -v xz >/dev/null; then xz -dc "$1"; else
      python3 -c 'import lzma, sys; sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())' "$1"; fi ;;
  esac
}
for f in dist/ptx-cache/*.gz dist/ptx-cache/*.xz; do
  [ -e "$f" ] || continue
  mkdir -p "$TF_CUDA_CACHE"
  t="$TF_CUDA_CACHE/$(basename "${f%.*}")"
  [ -e "$t" ] || { tf_unpack "$f" >"$t.$$" && mv "$t.$$" "$t"; }
done
