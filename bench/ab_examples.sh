#!/usr/bin/env bash
# A/B of a generator change on the GPU machine, in one call: the main job (headless CLI, empty lesson store) on each
# example in $EXAMPLES with the code of another commit (the "A" side; its `git archive` tarball in $A_TGZ), after
# bench/run_new_examples.sh has run the same examples with this tree (the "B" side). Same machine, same call, same
# budget: the speedups over each side's own original are comparable. Results under $OUT as A-cli-*, A-report-*.
# Usage (from the repo root, on the device, after run_new_examples.sh sourced the setup):
#   A_TGZ=snapA.tgz EXAMPLES="examples/matmul_naive" OUT=$OUT bash bench/ab_examples.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
rm -rf /tmp/snapA /tmp/siteA && mkdir -p /tmp/snapA && tar xzf "${A_TGZ:?name the A side tarball}" -C /tmp/snapA || exit 1
python3 -m pip install -q --disable-pip-version-check --no-index --no-deps --no-build-isolation --upgrade --target /tmp/siteA /tmp/snapA 2>/dev/null || exit 1
export PTXFACTORY_HOME=/tmp/ptxf-home-A
for entry in ${EXAMPLES:?}; do
  dir="/tmp/snapA/$entry"; [[ "$entry" == */* ]] || dir="/tmp/snapA/examples/$entry"; ex=$(basename "$entry")
  src=$(ls $dir/*.cu $dir/*.ptx 2>/dev/null | head -1); file=$(basename "$src"); name=${file%.*}
  rm -rf "/tmp/exA-$ex"; cp -r "$dir" "/tmp/exA-$ex"
  ( cd "/tmp/exA-$ex" && PYTHONPATH=/tmp/siteA:${PYTHONPATH:-} COLUMNS=220 timeout -k 45 ${JOB_TIMEOUT:-120} python3 -c "from ptxfactory.daemon.cli import main; main()" optimise "$file" --kernel "$name" --max-seconds ${MAX_SECONDS:-60} > "$OUT/A-cli-$ex.txt" 2>&1; echo "cli exit code $?" >> "$OUT/A-cli-$ex.txt" )
  cp "/tmp/exA-$ex/ptxfactory-out/$name/report.md" "$OUT/A-report-$ex.md" 2>/dev/null
  echo "== A $ex"; tail -4 "$OUT/A-cli-$ex.txt"
done
( cd "$OUT" && ls A-* >/dev/null 2>&1 && tar czf a-side.tgz A-* && rm -f A-* )
