#!/usr/bin/env bash
# One GPU-machine call for issue 13: QuACK installed from a stash left by earlier calls of the same lease, the
# rowwise GPU tests, bench/rmsnorm_matrix.py (factory vs torch vs QuACK), then bench/rowwise_sweep.py on the matrix.
# Results under $OUT. From the repo root on the device, .whl carried; QuACK's large archive
# (../shared/device/quack-wheels.sh: .whl2/cu13.tar.xz) is over the call's size limit beside the tree, so it travels
# split in parts, each copied to /root/stash by a call of its own just before this one: cat /root/stash/cu13.part.*
# Knobs: MAX_SECONDS (the job, 150), REPS (20), SKIP_TESTS, SKIP_SWEEP, SWEEP_SELECT (regex), SWEEP_LIMIT (24),
# SWEEP_TIMEOUT (s, 150), MATRIX_TIMEOUT (s, 450), PROFILE (ncu, bench/rowwise_profile.py), PROFILE_SELECT, PROFILE_TIMEOUT,
# PROFILE_SIZES (row lengths, each at the matrix's M), PROFILE_LIMIT (4), PROFILE_QUACK=1 (QuACK's launch too);
# JOB_ONLY=1 (a call of the job alone, MAX_SECONDS up to ~500) then FROM_JOB=1 (the timing, QuACK's ~7 minutes) in the
# same lease: the job no longer shares a call with QuACK's compiles.
set -uo pipefail
source .ci/device-setup.sh || { echo "setup failed"; exit 1; }
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$OUT/gpu.txt"
if ls /root/stash/cu13.part.* >/dev/null 2>&1; then
  cat /root/stash/cu13.part.* | tar -C /tmp/site -xJf - && export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages
  python3 -c "import importlib; q = importlib.import_module('quack.rmsnorm'); print('quack', q.rmsnorm_fwd, q.rmsnorm_fwd_tuned)" 2>&1 | tail -2
else
  echo "no QuACK stash: its columns will say not installed"
fi
if [ -z "${SKIP_TESTS:-}" ]; then
  timeout ${TEST_TIMEOUT:-200} python3 -m pytest -m gpu -v -s -p no:cacheprovider -rfEx tests/gpu/test_gpu_rowwise_cluster.py > "$OUT/pytest-gpu.txt" 2>&1
  grep -E "passed|failed|Error|rowwise" "$OUT/pytest-gpu.txt" | tail -60
fi
# JOB_ONLY=1: the job alone, its summary kept in /root/job for a FROM_JOB=1 call of the same lease (and copied to $OUT)
if [ -n "${JOB_ONLY:-}" ]; then
  timeout ${MATRIX_TIMEOUT:-450} python3 bench/rmsnorm_matrix.py --max-seconds ${MAX_SECONDS:-150} --out "$OUT/rmsnorm-matrix" \
    --job-only /root/job/summary.json 2>&1 | tail -5
  cp /root/job/summary.json "$OUT/job-summary.json"
  exit 0
fi
timeout ${MATRIX_TIMEOUT:-450} python3 bench/rmsnorm_matrix.py --max-seconds ${MAX_SECONDS:-150} --reps ${REPS:-20} --out "$OUT/rmsnorm-matrix" \
  ${FROM_JOB:+--from-job /root/job/summary.json} 2>&1 | tail -30
if [ -z "${SKIP_SWEEP:-}" ]; then
  timeout ${SWEEP_TIMEOUT:-150} python3 bench/rowwise_sweep.py --matrix --select "${SWEEP_SELECT:-.}" --limit ${SWEEP_LIMIT:-24} \
    --out "$OUT/sweep" > "$OUT/sweep.log" 2>&1; tail -40 "$OUT/sweep.log"
fi
if [ -n "${PROFILE:-}" ]; then  # Nsight Compute on chosen designs (default: the cluster ones) at the matrix's shapes
  sizes=()
  for n in ${PROFILE_SIZES:-256 32768 65536}; do
    m=$(python3 -c "import sys; sys.path.insert(0, 'bench'); from rmsnorm_matrix import MATRIX; print(dict((n, m) for m, n in MATRIX)[$n])")
    sizes+=(--size "M=$m,N=$n")
  done
  timeout ${PROFILE_TIMEOUT:-240} python3 bench/rowwise_profile.py --matrix --select "${PROFILE_SELECT:-cluster=8}" \
    --limit ${PROFILE_LIMIT:-4} ${PROFILE_QUACK:+--quack} "${sizes[@]}" --out "$OUT/profile.md" 2>&1 | tail -30
fi
