#!/usr/bin/env bash
# One GPU-machine call: the main job on every shipped example (headless CLI), tables and reports to $OUT.
# Usage (repo root, on the device, .whl carried; after `source .ci/device-setup.sh`): bash bench/run_examples.sh [NAMES...]
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
names=("$@"); [ ${#names[@]} -gt 0 ] || names=($(ls examples))
for name in "${names[@]}"; do
  work=/tmp/examples/$name; rm -rf "$work"; mkdir -p /tmp/examples; cp -r "examples/$name" "$work"
  ( cd "$work" && COLUMNS=220 timeout ${JOB_TIMEOUT:-120} ptxfactory optimise "$name.cu" --kernel "$name" > "$OUT/$name.txt" 2>&1
    echo "exit code $?" >> "$OUT/$name.txt"
    cp "ptxfactory-out/$name/report.json" "$OUT/$name.report.json" 2>/dev/null )
  grep -E "^best|no verified|exit code|Error|error" "$OUT/$name.txt" | sed "s/^/$name: /" | tail -3
done
