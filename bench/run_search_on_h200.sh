#!/usr/bin/env bash
# One GPU-machine call: every example through the search, cold and warm (bench/self_improvement.py).
# Usage (repo root, on the device, .whl carried): bash bench/run_search_on_h200.sh [--examples NAMES...] [--max-candidates N]
# Results (markdown + JSON) land in $OUT (or bench/results without $OUT).
set -uo pipefail
source .ci/device-setup.sh || { echo "device setup failed: run ../shared/device/fetch-wheels.sh and carry .whl"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
python3 bench/self_improvement.py --out "${OUT:-bench/results}" "$@" 2>&1 | tee "${OUT:-/tmp}/self-improvement.log" | grep -v "^|" | tail -40
