#!/usr/bin/env bash
# The llama decode step on the GPU against the CPU engine, then decode speed, on the H200 machine:
#   bash scripts/device/llama.sh [MODEL]    (default /tmp/tfm/model.gguf from model-parts.sh;
#   needs dist/tf-cuda-llama, built here with
#   cargo build --release -p tf-cuda --example tf-cuda-llama && cp target/release/examples/tf-cuda-llama dist/)
set -uo pipefail
. scripts/device/env.sh
model="${1:-/tmp/tfm/model.gguf}"
./dist/tf-cuda-llama "$model" --steps 40 --bench 256 2>&1 | tee "${OUT:-/tmp}/llama.md"
