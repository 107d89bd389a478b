#!/usr/bin/env bash
# The GPU kernel contract suite, on the H200 machine, from the repository root:
#   bash scripts/device/contract.sh            (needs dist/tf-cuda-contract, built here with
#   cargo build --release -p tf-cuda --bin tf-cuda-contract && cp target/release/tf-cuda-contract dist/)
# Writes the tables to $OUT/contract-*.md when OUT is set. `bash scripts/device/ptx-cache.sh` here
# first saves the device about 105 s of kernel compile.
set -uo pipefail
. scripts/device/env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader
out="${OUT:-/tmp}"
rc=0
./dist/tf-cuda-contract --out "$out/contract-full.md" || rc=$?
# Second run: the kernels now come from the disk cache.
./dist/tf-cuda-contract --quick --out "$out/contract-quick-cached.md" | head -3 || true
exit $rc
