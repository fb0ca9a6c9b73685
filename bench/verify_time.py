"""Benchmark: wall time of verification per candidate (issue: verification < 2 s).

Two ways:

- ``python3 bench/verify_time.py REPORT.json``: from a job's report.json (its rows' ``verify_s``, measured by the
  worker with ``time.perf_counter``: every spec and held-out size, every seed and stress variant, both orders, the
  reruns, the misaligned-view pass).
- ``python3 bench/verify_time.py --live [N]`` (GPU machine): verifies, in this process, the rmsnorm example's
  original and the first N (default 8) RMS instances of the "rowwise" family against the original with the current
  harness (``Evaluator.verify``, a fresh plan), after one warm-up verification that is not counted.

Prints the median, p90 and max; exit status 0 when the max is under 2 s, 2 when not, 1 when there is nothing to time.
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "rmsnorm" / "rmsnorm.cu"
TARGET_S = 2.0


def summary(times: list[float], what: str) -> int:
    if not times:
        print("no verification times in", what)
        return 1
    times = sorted(times)
    print(f"{len(times)} candidates verified ({what}); verify_s median {statistics.median(times):.3f} s, "
          f"p90 {times[int(0.9 * (len(times) - 1))]:.3f} s, max {times[-1]:.3f} s (target < {TARGET_S:g} s)")
    return 0 if times[-1] < TARGET_S else 2


def from_report(path: str) -> int:
    """The ``verify_s`` of every measured or rejected row of a report.json (``rows``, or ``candidates``)."""
    report = json.load(open(path))
    rows = report.get("rows") or report.get("candidates") or []
    times = []
    for row in rows:
        res = row.get("result", row)
        if res.get("outcome") in ("measured", "rejected") and res.get("verify_s"):
            times.append(res["verify_s"])
    return summary(times, path)


def live(n: int) -> int:
    """Verify the example's original and ``n`` rowwise RMS instances in-process on this machine's GPU."""
    from ptxfactory.harness.compile import Compiled, compile_candidate
    from ptxfactory.harness.gpu_eval import Evaluator
    from ptxfactory.harness.plan import make_plan
    from ptxfactory.harness.source import find_kernel
    from ptxfactory.protocol import load_spec
    from ptxfactory.search.base import GenContext
    from ptxfactory.search.generators.rowwise import RowwiseNormFamily
    from ptxfactory.search.strategy import original_candidate

    spec = load_spec(EXAMPLE.with_name(EXAMPLE.name + ".toml")).kernels["rmsnorm"]
    source = EXAMPLE.read_text()
    original = original_candidate(spec, source)
    ctx = GenContext(spec=spec, source=source, kernel=find_kernel(source, spec.name), original=original)
    family = [c for c in RowwiseNormFamily().propose(ctx) if c.params.get("norm") == "rms"][:n]
    ev = Evaluator()
    plan = make_plan(spec)

    def loaded(cand):
        compiled = compile_candidate(cand, spec.arch, spec.check.fast_math)
        if not isinstance(compiled, Compiled):
            raise SystemExit(f"{cand.description} does not compile: {compiled.log[:400]}")
        return ev.load(compiled.cubin, compiled.lowered_name, cand.launch, cand.key)

    base = loaded(original)
    ev.verify(spec, base, original.key, base, plan, original.key)  # warm-up: CuPy's own kernels compile here
    times = []
    for cand in [original] + family:
        kernel = loaded(cand)
        t0 = time.perf_counter()
        rejected = ev.verify(spec, base, original.key, kernel, plan, cand.key)
        times.append(time.perf_counter() - t0)
        verdict = "verified" if rejected is None else f"{rejected.check}: {rejected.reason[:120]}"
        print(f"{times[-1]:7.3f} s  {cand.description[:70]}: {verdict}")
    skipped = ev.notes(original.key)
    if skipped:
        print("note:", "; ".join(skipped))
    return summary(times, f"live, {len(plan.verify_sizes)} check + {len(plan.heldout_sizes)} held-out sizes x {len(plan.seeds)} seeds")


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--live":
        return live(int(argv[1]) if len(argv) > 1 else 8)
    if len(argv) != 1:
        print(__doc__)
        return 1
    return from_report(argv[0])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
