#!/usr/bin/env bash
# The SASS the H200 runs, read on a machine without a GPU: the program's PTX (NVRTC, through the
# tf-cuda example dump_ptx) assembled for sm_90 by ptxas and listed by cuobjdump; NVRTC and
# ptxas of the release scripts/device/ptx-cache.sh gives the GPU machine (scripts/cuda-tools.sh),
# so this is the machine code a device call runs. For counting instructions a weight before
# spending device time.
#   bash scripts/sass.sh KERNEL...
# Prints each kernel's registers, spills, instruction mix and loop lengths; writes its SASS to
# $TF_SASS_OUT/KERNEL.sass (default /tmp/tf-sass).
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 KERNEL..." >&2; exit 2; }
cd "$(dirname "$0")/.."
out="${TF_SASS_OUT:-/tmp/tf-sass}"
mkdir -p "$out"
. scripts/cuda-tools.sh
cuda_tools_fetch listers
export PATH="$cuda_bin:$PATH"  # cuobjdump runs nvdisasm
LD_LIBRARY_PATH="$cuda_nvrtc_lib" cargo run -q --profile ci -p tf-cuda --example dump_ptx \
  > "$out/program.ptx"
"$cuda_bin/ptxas" -arch=sm_90 -v "$out/program.ptx" -o "$out/program.cubin" \
  > "$out/ptxas.log" 2>&1
for k in "$@"; do
  if ! grep -q "Function properties for $k\$" "$out/ptxas.log"; then
    echo "$k: no such kernel in the program" >&2
    exit 1
  fi
  echo "== $k"
  grep -A2 "Function properties for $k\$" "$out/ptxas.log" | tail -2 | sed 's/^ *ptxas info *: //'
  "$cuda_bin/cuobjdump" -sass -fun "$k" "$out/program.cubin" |
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
