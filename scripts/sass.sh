#!/usr/bin/env bash
# The SASS the H200 runs, read on a machine without a GPU: the program's PTX (NVRTC, through the
# tf-cuda example dump_ptx) assembled for sm_90 by ptxas and listed by cuobjdump, the tools the
# driver's JIT matches. For counting instructions a weight before spending device time.
#   bash scripts/sass.sh KERNEL...
# Prints each kernel's registers, spills, instruction mix and loop lengths; writes its SASS to
# $TF_SASS_OUT/KERNEL.sass (default /tmp/tf-sass). ptxas, cuobjdump, nvdisasm and NVRTC come from
# the pip wheels nvidia-cuda-nvcc, -cuobjdump, -nvdisasm and -nvrtc, unpacked once into
# $TF_SASS_TOOLS (default ~/.cache/tensorfold-sass-tools); nothing is installed system-wide.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 KERNEL..." >&2; exit 2; }
cd "$(dirname "$0")/.."
tools="${TF_SASS_TOOLS:-$HOME/.cache/tensorfold-sass-tools}"
out="${TF_SASS_OUT:-/tmp/tf-sass}"
mkdir -p "$tools" "$out"
bin="$tools/nvidia/cu13/bin"
if [ ! -x "$bin/ptxas" ] || [ ! -x "$bin/cuobjdump" ] || [ ! -x "$bin/nvdisasm" ] ||
  ! ls "$tools"/nvidia/cu13/lib/libnvrtc.so* >/dev/null 2>&1; then
  echo "fetching ptxas, cuobjdump, nvdisasm and NVRTC (pip wheels) into $tools"
  python3 -m pip download -q --no-deps -d "$tools/wheels" \
    nvidia-cuda-nvcc nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm nvidia-cuda-nvrtc
  for w in "$tools"/wheels/*.whl; do python3 -m zipfile -e "$w" "$tools"; done
  chmod +x "$bin"/*
fi
export PATH="$bin:$PATH"  # cuobjdump runs nvdisasm
export LD_LIBRARY_PATH="$tools/nvidia/cu13/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cargo run -q --release -p tf-cuda --example dump_ptx > "$out/program.ptx"
"$bin/ptxas" -arch=sm_90 -v "$out/program.ptx" -o "$out/program.cubin" \
  > "$out/ptxas.log" 2>&1
for k in "$@"; do
  if ! grep -q "Function properties for $k\$" "$out/ptxas.log"; then
    echo "$k: no such kernel in the program" >&2
    exit 1
  fi
  echo "== $k"
  grep -A2 "Function properties for $k\$" "$out/ptxas.log" | tail -2 | sed 's/^ *ptxas info *: //'
  "$bin/cuobjdump" -sass -fun "$k" "$out/program.cubin" |
    grep -E '^\s+/\*[0-9a-f]{4}\*/' | sed -E 's#^\s+/\*[0-9a-f]+\*/\s*##; s#\s*/\*.*##' > "$out/$k.sass"
  echo "$(wc -l < "$out/$k.sass") instructions (SASS in $out/$k.sass); the most frequent:"
  sed -E 's/^@!?U?P[0-9T] //' "$out/$k.sass" | awk '{print $1}' | sort | uniq -c | sort -rn | head -12
  # Loops: a branch back to an earlier instruction (16 bytes each) closes one.
  python3 - "$out/$k.sass" <<'PY'
import re, sys
lines = open(sys.argv[1]).read().splitlines()
for n, line in enumerate(lines):
    m = re.search(r"\bBRA\b.*?0x([0-9a-f]+)", line)
    if m and int(m.group(1), 16) // 16 < n:
        start = int(m.group(1), 16) // 16
        print(f"loop: instructions {start}..{n}, {n - start + 1} in its body")
PY
done
