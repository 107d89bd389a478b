#!/usr/bin/env bash
# Run here (no GPU needed), before a device call that times several builds at once: builds a
# variant of HEAD in a git worktree, with the given commits reverted in turn (reverting a
# revert brings back a change kept in history), strips its tf-cuda-synthetic into dist/NAME/,
# and adds its kernel program to dist/ptx-cache (ptx-cache.sh), so the device neither compiles
# nor translates it. About 6 MB a variant travels (the carry limit is 64 MiB in all).
#   bash scripts/device/variant.sh NAME [COMMIT...]
# The worktrees share one target folder ($TF_VARIANT_TARGET, default /tmp/tf-variant-target).
# Then on the device: bash scripts/device/variants-ab.sh ROUNDS dist-base dist/NAME ...
set -euo pipefail
cd "$(dirname "$0")/../.."
name=${1:?usage: variant.sh NAME [COMMIT...]}
shift
tree="/tmp/tf-variant-$name"
export CARGO_TARGET_DIR="${TF_VARIANT_TARGET:-/tmp/tf-variant-target}"
git worktree remove --force "$tree" 2>/dev/null || true
git worktree add -q --detach "$tree" HEAD
for c in "$@"; do
  git -C "$tree" revert --no-edit "$c" >/dev/null
  echo "$name: $(git -C "$tree" log -1 --format='%h %s' | cut -c1-100)"
done
(cd "$tree" && cargo build -q --profile ci -p tf-cuda --example tf-cuda-synthetic)
mkdir -p "dist/$name"
strip -o "dist/$name/tf-cuda-synthetic" "$CARGO_TARGET_DIR/ci/examples/tf-cuda-synthetic"
bash scripts/device/ptx-cache.sh "$tree" | tail -2
git worktree remove --force "$tree"
