#!/usr/bin/env bash
# One GPU-machine call for what no GPU has run since 2026-12-04 (the tenth and eleventh sessions): the GPU tests of the
# tenth session's mechanisms (the cluster rows, the fusions, the attention family, coarsen_outer's interior path,
# vectorize_x), then short jobs on trials whose candidates the eleventh session changed: frobenius_norm (vector_loops
# on atomic_agg's grid-stride loop), sum_last2 (collapse read at the flat index), layernorm_sample (the cluster rows).
# Results under $OUT (pytest-round11.txt, examples.tgz).
# Usage (repo root, on the device, .whl carried): bash bench/gpu_round11.sh   [TEST_TIMEOUT=...] [TRIALS="..."]
set -uo pipefail
source .ci/device-setup.sh || { echo "setup failed"; exit 1; }
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PTXFACTORY_FAILURE_LOG="$OUT/failures.txt"  # each failure's reason as it happens (tests/conftest.py)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt" 2>&1
timeout ${TEST_TIMEOUT:-270} python3 -m pytest -m gpu -v -s -p no:cacheprovider -rfEx --durations=10 -n ${WORKERS:-8} \
    tests/gpu/test_gpu_rowpar_cluster.py tests/gpu/test_gpu_fusions.py tests/gpu/test_gpu_family_attention.py \
    tests/gpu/test_gpu_coarsen_outer.py tests/gpu/test_gpu_vectorize_x.py > "$OUT/pytest-round11.txt" 2>&1
echo "exit $?" >> "$OUT/pytest-round11.txt"
grep -E "PASSED|FAILED|ERROR|passed|failed" "$OUT/pytest-round11.txt" | tail -25
EXAMPLES="${TRIALS:-bench/trials/frobenius_norm bench/trials/sum_last2 bench/trials/layernorm_sample}" SKIP_TESTS=1 SKIP_AA=1 \
    SKIP_WARMUP=1 MAX_SECONDS=${MAX_SECONDS:-35} JOB_TIMEOUT=${JOB_TIMEOUT:-70} OUT="$OUT" bash bench/run_new_examples.sh
