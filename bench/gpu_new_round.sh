#!/usr/bin/env bash
# One GPU-machine call for this round's new mechanisms (2026-12-05, tenth session): their GPU tests first (the cluster
# rows, the fusions, the attention family, coarsen_outer's interior path, vectorize_x), then short jobs on the
# few-long-rows trials they were built for. Results under $OUT (pytest-new.txt, examples.tgz).
# Usage (repo root, on the device, .whl carried): bash bench/gpu_new_round.sh   [TEST_TIMEOUT=...] [TRIALS="..."]
set -uo pipefail
source .ci/device-setup.sh || { echo "setup failed"; exit 1; }
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt" 2>&1
timeout ${TEST_TIMEOUT:-330} python3 -m pytest -m gpu -v -s -p no:cacheprovider -rfEx --durations=10 -n ${WORKERS:-8} \
    tests/gpu/test_gpu_rowpar_cluster.py tests/gpu/test_gpu_fusions.py tests/gpu/test_gpu_family_attention.py \
    tests/gpu/test_gpu_coarsen_outer.py tests/gpu/test_gpu_vectorize_x.py > "$OUT/pytest-new.txt" 2>&1
echo "exit $?" >> "$OUT/pytest-new.txt"
grep -E "PASSED|FAILED|ERROR|passed|failed" "$OUT/pytest-new.txt" | tail -25
EXAMPLES="${TRIALS:-bench/trials/bn_stats_nchw bench/trials/layernorm_sample}" SKIP_TESTS=1 SKIP_AA=1 SKIP_WARMUP=1 \
    MAX_SECONDS=${MAX_SECONDS:-35} JOB_TIMEOUT=${JOB_TIMEOUT:-90} OUT="$OUT" bash bench/run_new_examples.sh
