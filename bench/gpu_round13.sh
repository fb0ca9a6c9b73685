#!/usr/bin/env bash
# One GPU-machine call for what the thirteenth session built (2026-12-05), none of it run on a GPU yet: the original's
# float64 shadow and the slow original's few timed rounds (tests/gpu/test_gpu_shadow.py), the seven tests that failed
# without a reason on an H100 that day (the half-2 run was cut off before pytest's summary), then short jobs on two
# trials: layernorm_sample (a slow serial original: 0.77 s a launch, 2 candidates in 70 s) and sobel3x3 (interior's
# clamps, added later that session). Each failure's reason lands in $OUT/failures.txt as it happens (PTXFACTORY_FAILURE_LOG).
# Usage (repo root, on the device, .whl carried): bash bench/gpu_round13.sh   [TEST_TIMEOUT=...] [TRIALS="..."] [SKIP_JOBS=1]
set -uo pipefail
source .ci/device-setup.sh || { echo "setup failed"; exit 1; }
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PTXFACTORY_FAILURE_LOG="$OUT/failures.txt"  # each failure's reason as it happens (tests/conftest.py)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt" 2>&1
timeout ${TEST_TIMEOUT:-300} python3 -m pytest -m gpu -v -s -p no:cacheprovider -rfEx --durations=10 -n ${WORKERS:-4} \
    tests/gpu/test_gpu_shadow.py \
    "tests/gpu/test_harness.py::test_facts_and_original_matches_itself" \
    "tests/gpu/test_harness.py::test_an_original_that_faults_on_misaligned_views_turns_the_pass_off" \
    "tests/gpu/test_gpu_family_elementwise.py::test_elementwise_family_on_bias_gelu" \
    "tests/redteam/test_redteam_gpu.py::test_redteam_file_gets_the_expected_answer[missing_sync]" \
    "tests/redteam/test_redteam_gpu.py::test_redteam_file_gets_the_expected_answer[poison_detect]" \
    tests/gpu/test_gpu_rowwise_cluster.py tests/gpu/test_gpu_rowpar_cluster.py tests/gpu/test_gpu_blockrow_cluster.py \
    "tests/gpu/test_gpu_round12.py::test_this_sessions_passes_verify[blur5-passes6]" \
    "tests/gpu/test_gpu_round12.py::test_this_sessions_passes_verify[sobel3x3-passes7]" > "$OUT/pytest-round13.txt" 2>&1
echo "exit $?" >> "$OUT/pytest-round13.txt"
grep -E "PASSED|FAILED|ERROR|passed|failed" "$OUT/pytest-round13.txt" | cut -c1-200 | tail -25
[ -n "${SKIP_JOBS:-}" ] && exit 0  # (the tests alone, when device time is short)
EXAMPLES="${TRIALS:-bench/trials/layernorm_sample bench/trials/sobel3x3 bench/trials/array_sum_1blk}" SKIP_TESTS=1 SKIP_AA=1 \
    SKIP_WARMUP=1 MAX_SECONDS=${MAX_SECONDS:-60} JOB_TIMEOUT=${JOB_TIMEOUT:-100} OUT="$OUT" bash bench/run_new_examples.sh
