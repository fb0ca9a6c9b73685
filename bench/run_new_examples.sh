#!/usr/bin/env bash
# One GPU-machine call: the GPU test tier, then the main job (headless CLI, empty lesson store) on each
# example named in $EXAMPLES (default: the examples this round added). Results under $OUT.
# Usage (from the repo root, on the device, with .whl carried): bash bench/run_new_examples.sh
set -uo pipefail
source .ci/device-setup.sh || { echo "setup failed"; exit 1; }
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$OUT/gpu.txt"
# every job starts from an empty lesson store (its own PTXFACTORY_HOME, emptied before it): before 2026-12-03 the
# jobs of one call shared one store, so every job after a call's first one ran with the earlier jobs' lessons
if [ -z "${SKIP_TESTS:-}" ]; then
  # straight to the file (-v: one line per test as it ends), so a run cut off by the time limit still says how far it got
  timeout ${TEST_TIMEOUT:-300} python3 -m pytest -m gpu -v -p no:cacheprovider -rfEx --durations=15 ${PYTEST_ARGS:-} > "$OUT/pytest-gpu.txt" 2>&1
  tail -40 "$OUT/pytest-gpu.txt"
fi
# (timeout's SIGTERM cancels the job after its current candidate: a partial report; 45 s later, SIGKILL)
# (the default list, at up to JOB_TIMEOUT s each, takes more than one 10-minute call: split it with EXAMPLES=...)
# (an entry with a slash is a folder of its own, bench/trials/conv2d: the generality trials)
if [ -z "${SKIP_WARMUP:-}" ]; then
  # a fresh machine's first job pays a cold start inside the original's verification (l2norm_rows, 2026-12-03: 17.6-20.7 s
  # as a call's first job, 3.4 s as a later one): a throwaway job first, so that the budgets of the jobs below compare
  rm -rf /tmp/ex-warmup /tmp/ptxf-home; cp -r examples/rowsum /tmp/ex-warmup
  ( cd /tmp/ex-warmup && PTXFACTORY_HOME=/tmp/ptxf-home timeout -k 20 120 ptxfactory optimise rowsum.cu --kernel rowsum --max-candidates 3 > "$OUT/warmup.txt" 2>&1 )
fi
for entry in ${EXAMPLES:-embedding rowsum_seq dequant_int8 scale_bias l2norm_rows xent_fwd standardize_rows rope sgd_momentum swiglu stencil5 row_argmax}; do
  dir="examples/$entry"; [[ "$entry" == */* ]] && dir="$entry"; ex=$(basename "$entry")
  src=$(ls $dir/*.cu $dir/*.ptx 2>/dev/null | head -1); file=$(basename "$src"); name=${file%.*}
  # the spec's first kernel (a trial's kernel need not be named after its file: convT2d_s2.cu holds conv_transpose2d)
  spec_kernel=$(grep -oP '^\[kernel\.\K[A-Za-z_][A-Za-z0-9_]*(?=\])' "$src.toml" 2>/dev/null | head -1); name=${spec_kernel:-$name}
  rm -rf "/tmp/ex-$ex" /tmp/ptxf-home; cp -r "$dir" "/tmp/ex-$ex"; export PTXFACTORY_HOME=/tmp/ptxf-home
  ( cd "/tmp/ex-$ex" && COLUMNS=220 timeout -k 45 ${JOB_TIMEOUT:-120} ptxfactory optimise "$file" --kernel "$name" --max-seconds ${MAX_SECONDS:-60} > "$OUT/cli-$ex.txt" 2>&1; echo "cli exit code $?" >> "$OUT/cli-$ex.txt" )
  cp "/tmp/ex-$ex/ptxfactory-out/$name/report.md" "$OUT/report-$ex.md" 2>/dev/null
  cp "/tmp/ex-$ex/ptxfactory-out/$name/report.json" "$OUT/report-$ex.json" 2>/dev/null
  echo "== $ex"; tail -4 "$OUT/cli-$ex.txt"
done
if [ -z "${SKIP_AA:-}" ]; then
  timeout 200 python3 bench/aa_check.py --runs ${AA_RUNS:-20} examples/rmsnorm/rmsnorm.cu:rmsnorm examples/softmax/softmax.cu:softmax --out "$OUT/aa.json" 2>&1 | tail -5 | tee "$OUT/aa.txt"
fi
# the device tool brings back at most 8 files: the examples' outputs travel as one archive
( cd "$OUT" && ls cli-* report-* >/dev/null 2>&1 && tar czf examples.tgz cli-* report-* warmup.txt 2>/dev/null; rm -f cli-* report-* warmup.txt )
