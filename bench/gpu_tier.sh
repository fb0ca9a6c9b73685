#!/usr/bin/env bash
# The GPU tier (pytest -m gpu) in two halves, each one device call under ten minutes with eight workers: the tier's
# longest tests (the hold_row job, the main job, smem_tile's, atomic_agg's, colpar's) split between them. Every file of
# tests/gpu and tests/redteam is in exactly one half (tests/unit/test_gpu_tier_halves.py checks).
# Usage (repo root, on the device, .whl carried): bash bench/gpu_tier.sh 1|2   [PYTEST_ARGS=...] [OUT=...]
set -uo pipefail
HALF1="tests/gpu/test_gpu_hold_row.py tests/gpu/test_gpu_smem_tile.py tests/gpu/test_main_job.py tests/gpu/test_gpu_rowpar.py
tests/gpu/test_gpu_vector_loops.py tests/gpu/test_gpu_tune.py tests/gpu/test_gpu_transform.py tests/gpu/test_gpu_scan.py
tests/gpu/test_gpu_specialise.py tests/gpu/test_gpu_coarsen.py tests/gpu/test_gpu_coarsen_outer.py tests/gpu/test_gpu_vectorize_x.py tests/gpu/test_gpu_profile.py tests/gpu/test_python_reference.py
tests/gpu/test_gpu_round12.py tests/gpu/test_gpu_shadow.py"
HALF2="tests/gpu/test_gpu_atomic_agg.py tests/gpu/test_gpu_colpar.py tests/gpu/test_gpu_family_elementwise.py
tests/gpu/test_gpu_family_layernorm.py tests/gpu/test_gpu_family_rowreduce.py tests/gpu/test_gpu_family_attention.py tests/gpu/test_gpu_family_softmax.py
tests/gpu/test_gpu_family_transpose.py tests/gpu/test_gpu_mma_tile.py tests/gpu/test_gpu_grid_reduce_collapse.py tests/gpu/test_gpu_rowwise_cluster.py tests/gpu/test_gpu_rowpar_cluster.py tests/gpu/test_gpu_blockrow_cluster.py tests/gpu/test_gpu_fusions.py
tests/gpu/test_gpu_ptx.py tests/gpu/test_gpu_ptx_driver_jit.py tests/gpu/test_harness.py tests/gpu/test_naive_examples.py
tests/redteam"
case "${1:-}" in
  1) files=$HALF1 ;;
  2) files=$HALF2 ;;
  list) echo $HALF1 $HALF2; exit 0 ;;
  *) echo "usage: bash bench/gpu_tier.sh 1|2|list"; exit 2 ;;
esac
source .ci/device-setup.sh || { echo "setup failed"; exit 1; }
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PTXFACTORY_FAILURE_LOG="$OUT/failures.txt"  # each failure's reason as it happens (tests/conftest.py)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt" 2>&1
# straight to the file (-v: one line per test as it ends), so a run cut off by the limit still says how far it got
timeout ${TEST_TIMEOUT:-540} python3 -m pytest -m gpu -v -p no:cacheprovider -rfEx --durations=15 -n ${WORKERS:-8} \
    ${PYTEST_ARGS:-} $files > "$OUT/pytest-gpu-half$1.txt" 2>&1
echo "exit $?" >> "$OUT/pytest-gpu-half$1.txt"
tail -25 "$OUT/pytest-gpu-half$1.txt"
