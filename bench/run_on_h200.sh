#!/usr/bin/env bash
# One GPU-machine call: GPU test tier, the headless main job through the CLI, the benchmark report.
# Usage (from the repo root, on the device, with .whl carried): bash bench/run_on_h200.sh
set -uo pipefail
source .ci/device-setup.sh || { echo "setup failed"; exit 1; }
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$OUT/gpu.txt"
export PTXFACTORY_HOME=/tmp/ptxf-home
timeout 330 python3 -m pytest -m gpu -q -p no:cacheprovider -rA ${PYTEST_ARGS:-} 2>&1 | tail -60 | tee "$OUT/pytest-gpu.txt"
cp -r examples/rmsnorm /tmp/rmsnorm && cd /tmp/rmsnorm
COLUMNS=200 timeout 200 ptxfactory optimise rmsnorm.cu --kernel rmsnorm > "$OUT/cli.txt" 2>&1; echo "cli exit code $?" | tee -a "$OUT/cli.txt"
tail -5 "$OUT/cli.txt"
cp ptxfactory-out/rmsnorm/report.md ptxfactory-out/rmsnorm/report.json ptxfactory-out/rmsnorm/best.cu "$OUT/" 2>/dev/null
cd - >/dev/null
python3 bench/rmsnorm_main_job.py --report /tmp/rmsnorm/ptxfactory-out/rmsnorm/report.json --out "$OUT" 2>&1 | head -20
