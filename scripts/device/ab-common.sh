# Sourced by switch-ab.sh and build-ab.sh on the H200 machine: `step NAME SECONDS CMD...` runs
# CMD under a timeout into $out/NAME.log and prints its exit status and seconds; `receipts`
# runs the build in dist/'s receipts (the kernel contract, every Nemotron-H and Muse Spark
# fixture against the CPU engine, every fixture through `tensorfold score`). Both count failed
# steps in `fails`. Run `bash scripts/device/ptx-cache.sh` here before the call (and with each
# base build's tree): a fresh machine then skips about 105 s of kernel compile.
. scripts/device/env.sh >/dev/null
out="${OUT:-/tmp}"
mkdir -p "$out"
fails=0
step() {
  local name=$1; shift
  local t0=$SECONDS
  timeout "$@" >"$out/$name.log" 2>&1
  local rc=$?
  echo "== $name: exit $rc, $((SECONDS - t0)) s"
  [ "$rc" = 0 ] || fails=$((fails + 1))
  return $rc
}
receipts() {
  step contract 240 ./dist/tf-cuda-contract --out "$out/contract.md"
  tail -1 "$out/contract.log"
  step nemotron 120 bash scripts/device/nemotron.sh
  tail -1 "$out/nemotron.log"
  step muse 60 bash scripts/device/muse.sh
  tail -1 "$out/muse.log"
  step fixtures 150 bash scripts/device/fixtures.sh
  echo "$(grep -c '^PASS' "$out/fixtures.log") fixtures PASS"
  grep FAIL "$out/fixtures.log" | head -3
  return 0
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
