#!/usr/bin/env bash
# The second GPU-machine call of 2026-12-05 (eleventh session): the GPU tests of the passes this session changed
# (mma_tile's and atomic_agg's lambda parameters, specialise's divisors) and the main job, then short jobs on the
# session's trials whose proposals changed (triplet_loss: vector_loops beside atomic_agg; convT2d_s2: the launcher's
# constants and specialise's divisor; maxpool1d_dil). Results under $OUT (pytest-round11.txt, examples.tgz).
# Usage (repo root, on the device, .whl carried): bash bench/gpu_round11.sh   [TEST_TIMEOUT=...] [TRIALS="..."]
set -uo pipefail
source .ci/device-setup.sh || { echo "setup failed"; exit 1; }
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt" 2>&1
timeout ${TEST_TIMEOUT:-300} python3 -m pytest -m gpu -v -s -p no:cacheprovider -rfEx --durations=10 -n ${WORKERS:-8} \
    tests/gpu/test_gpu_mma_tile.py tests/gpu/test_gpu_atomic_agg.py tests/gpu/test_gpu_specialise.py \
    tests/gpu/test_main_job.py > "$OUT/pytest-round11.txt" 2>&1
echo "exit $?" >> "$OUT/pytest-round11.txt"
grep -E "PASSED|FAILED|ERROR|passed|failed" "$OUT/pytest-round11.txt" | tail -25
EXAMPLES="${TRIALS:-bench/trials/triplet_loss bench/trials/convT2d_s2 bench/trials/maxpool1d_dil}" SKIP_TESTS=1 SKIP_AA=1 \
    SKIP_WARMUP=1 MAX_SECONDS=${MAX_SECONDS:-40} JOB_TIMEOUT=${JOB_TIMEOUT:-75} OUT="$OUT" bash bench/run_new_examples.sh
