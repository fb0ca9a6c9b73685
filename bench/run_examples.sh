#!/usr/bin/env bash
# One GPU-machine call: the main job on every shipped example (headless CLI); tables and reports in one
# tarball, $OUT/example-results.tgz.
# Usage (repo root, on the device, .whl carried; after `source .ci/device-setup.sh`): bash bench/run_examples.sh [NAMES...]
set -uo pipefail
RESULTS=/tmp/example-results; mkdir -p "$RESULTS"
names=("$@"); [ ${#names[@]} -gt 0 ] || names=($(ls examples))
for name in "${names[@]}"; do
  work=/tmp/examples/$name; rm -rf "$work"; mkdir -p /tmp/examples; cp -r "examples/$name" "$work"
  ( cd "$work" && COLUMNS=220 timeout ${JOB_TIMEOUT:-120} ptxfactory optimise "$name.cu" --kernel "$name" > "$RESULTS/$name.txt" 2>&1
    echo "exit code $?" >> "$RESULTS/$name.txt"
    cp "ptxfactory-out/$name/report.json" "$RESULTS/$name.report.json" 2>/dev/null )
  grep -E "^best|no verified|exit code|Error|error" "$RESULTS/$name.txt" | sed "s/^/$name: /" | tail -3
  [ -n "${OUT:-}" ] && { echo "=== $name"; cat "$RESULTS/$name.txt"; } >> "$OUT/examples.txt"  # survives a cut-off run
done
# one file back: at most 8 files return from the device
[ -n "${OUT:-}" ] && tar czf "$OUT/example-results.tgz" -C "$RESULTS" .
