#!/usr/bin/env bash
# One GPU-machine call for what the twelfth session built (2026-12-05; no device machine could be started that
# session): the GPU tests of its passes (tests/gpu/test_gpu_round12.py: modstep, interior, coarsen_y, the dual GEMM,
# atomic_agg's views, each on the trial it was built for), then short jobs on three of those trials. Run it after
# bench/gpu_round11.sh (the tenth and eleventh sessions' work). Results under $OUT (pytest-round12.txt, examples.tgz).
# Usage (repo root, on the device, .whl carried): bash bench/gpu_round12.sh   [TEST_TIMEOUT=...] [TRIALS="..."]
set -uo pipefail
source .ci/device-setup.sh || { echo "setup failed"; exit 1; }
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PTXFACTORY_FAILURE_LOG="$OUT/failures.txt"  # each failure's reason as it happens (tests/conftest.py)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt" 2>&1
timeout ${TEST_TIMEOUT:-300} python3 -m pytest -m gpu -v -s -p no:cacheprovider -rfEx --durations=10 -n ${WORKERS:-6} \
    tests/gpu/test_gpu_round12.py > "$OUT/pytest-round12.txt" 2>&1
echo "exit $?" >> "$OUT/pytest-round12.txt"
grep -E "PASSED|FAILED|ERROR|passed|failed" "$OUT/pytest-round12.txt" | tail -25
EXAMPLES="${TRIALS:-bench/trials/convT2d_s2 bench/trials/avgpool2d_excl bench/trials/geglu_mlp}" SKIP_TESTS=1 SKIP_AA=1 \
    SKIP_WARMUP=1 MAX_SECONDS=${MAX_SECONDS:-40} JOB_TIMEOUT=${JOB_TIMEOUT:-75} OUT="$OUT" bash bench/run_new_examples.sh
