#!/usr/bin/env bash
# Each kernel of one graphed one-stream decode step timed alone by ncu, summed by kernel, from
# the repository root on the device machine:
#   bash scripts/device/ncu-step.sh [MODEL]        (default: bolt)
# Needs dist/tf-cuda-synthetic (its --profile-step brackets one step with cuProfilerStart/Stop)
# and ncu. ncu runs the graph's kernels one at a time, caches and clocks left alone: the sum is
# the step's kernels without their overlap or the gaps between them. Small kernels read high
# this way (a trivial one about 2.5 us: docs/perf.md, session 30); for what a kernel costs on
# the step's path, see tf-cuda-synthetic --leave-out. Then the whole graph as
# one workload (--graph-profiling graph). Writes ncu-step-MODEL.csv to $OUT (or /tmp).
set -uo pipefail
. scripts/device/env.sh >/dev/null
out="${OUT:-/tmp}"
model="${1:-bolt}"
common=(--profile-from-start off --clock-control none --cache-control none
  --metrics gpu__time_duration.sum --csv --print-units base)
timeout 400 ncu "${common[@]}" ./dist/tf-cuda-synthetic --model "$model" --bench 2 --streams 1 \
  --profile-step >"$out/ncu-step-$model.csv" 2>"$out/ncu-step-$model.err"
echo "== kernels alone: exit $?"
python3 - "$out/ncu-step-$model.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head = rows[0]
name, metric, value = head.index("Kernel Name"), head.index("Metric Name"), head.index("Metric Value")
by = collections.defaultdict(list)
for r in rows[1:]:
    if r[metric] == "gpu__time_duration.sum":
        by[r[name].split("(")[0]].append(float(r[value].replace(",", "")) / 1e3)
total = sum(sum(v) for v in by.values())
print("| kernel | launches | us alone (sum) | us a launch |")
print("| --- | ---: | ---: | ---: |")
for k, v in sorted(by.items(), key=lambda kv: -sum(kv[1])):
    print(f"| {k} | {len(v)} | {sum(v):.1f} | {sum(v) / len(v):.2f} |")
print(f"| all | {sum(len(v) for v in by.values())} | {total:.1f} | |")
PY
timeout 200 ncu --graph-profiling graph "${common[@]}" ./dist/tf-cuda-synthetic --model "$model" \
  --bench 2 --streams 1 --profile-step >"$out/ncu-graph-$model.csv" 2>&1
echo "== the graph as one: exit $?"
grep -E 'gpu__time_duration|profiled step' "$out/ncu-graph-$model.csv" | tail -3
