"""Benchmark: wall time of verification + timing per candidate (issue: < 2 s median at the examples' sizes).

Two ways:

- ``python3 bench/verify_time.py REPORT.json``: from a job's report.json (its rows' ``verify_s`` and ``wall_s``,
  measured by the worker with ``time.perf_counter``: every spec and held-out size, every seed and stress variant,
  both orders, the reruns, the misaligned-view pass; then timing at every bench size).
- ``python3 bench/verify_time.py --live [N]`` (GPU machine): the rmsnorm example's original and the first N
  (default 8) RMS instances of the "rowwise" family evaluated against the original through a :class:`GpuBackend`
  (a worker process, one job session: the spec, plan and baseline sent once, the original's outputs and the timing
  inputs kept on the device), as a job does, after one warm-up evaluation that opens the session (not counted).

Prints the median, p90 and max of verify + timing (``wall_s``) and of verification alone (``verify_s``); exit
status 0 when the median of verify + timing is under 2 s, 2 when not, 1 when there is nothing to time.
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


def _stats(times: list[float]) -> str:
    times = sorted(times)
    return (f"median {statistics.median(times):.3f} s, p90 {times[int(0.9 * (len(times) - 1))]:.3f} s, "
            f"max {times[-1]:.3f} s")


def summary(walls: list[float], verifies: list[float], what: str) -> int:
    """Print the figures; the exit status (0: median verify + timing under :data:`TARGET_S`, 2: not, 1: no data)."""
    if not walls and not verifies:
        print("no verification times in", what)
        return 1
    print(f"{max(len(walls), len(verifies))} candidates ({what})")
    if verifies:
        print(f"  verify_s            {_stats(verifies)}")
    if not walls:
        return 0 if statistics.median(verifies) < TARGET_S else 2
    print(f"  verify + timing     {_stats(walls)} (target: median < {TARGET_S:g} s)")
    return 0 if statistics.median(walls) < TARGET_S else 2


def from_report(path: str) -> int:
    """The ``verify_s`` and ``wall_s`` of every measured or rejected row of a report.json (``rows``, or ``candidates``)."""
    report = json.load(open(path))
    rows = report.get("rows") or report.get("candidates") or []
    walls, verifies = [], []
    for row in rows:
        res = row.get("result", row)
        if res.get("outcome") in ("measured", "rejected"):
            if res.get("verify_s"):
                verifies.append(res["verify_s"])
            if res.get("wall_s") and res.get("outcome") == "measured":
                walls.append(res["wall_s"])
    return summary(walls, verifies, path)


def live(n: int) -> int:
    """Evaluate the example's original and ``n`` rowwise RMS instances through a GpuBackend on this machine's GPU."""
    import asyncio

    from ptxfactory.harness.compile import Compiled, compile_candidate
    from ptxfactory.harness.gpu_backend import GpuBackend
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
    plan = make_plan(spec)

    def compiled(cand) -> Compiled:
        out = compile_candidate(cand, spec.arch, spec.check.fast_math)
        if not isinstance(out, Compiled):
            raise SystemExit(f"{cand.description} does not compile: {out.log[:400]}")
        return out

    base = compiled(original)
    artifacts = [base] + [compiled(c) for c in family]

    async def go():
        backend = GpuBackend()
        walls, verifies = [], []
        try:
            await backend.facts()
            t0 = time.perf_counter()
            first = await backend.evaluate(spec, base, base, plan)  # warm-up: opens the session, fills the caches
            print(f"{time.perf_counter() - t0:7.3f} s  warm-up (session opened, CuPy's kernels compiled): {first.outcome}")
            for art in artifacts:
                t0 = time.perf_counter()
                result = await backend.evaluate(spec, base, art, plan)
                trip = time.perf_counter() - t0
                verdict = result.outcome if result.outcome != "rejected" else f"{result.check}: {result.reason[:100]}"
                verify_s, wall_s = getattr(result, "verify_s", None) or 0.0, getattr(result, "wall_s", None) or 0.0
                print(f"{trip:7.3f} s  (verify {verify_s:.3f} s, worker {wall_s:.3f} s)  "
                      f"{art.candidate.description[:60]}: {verdict}")
                if verify_s:
                    verifies.append(verify_s)
                if result.outcome == "measured":
                    walls.append(trip)
            print(f"sessions opened: {backend.opened}")
        finally:
            await backend.close()
        return walls, verifies

    walls, verifies = asyncio.run(go())
    return summary(walls, verifies, f"live through GpuBackend, {len(plan.verify_sizes)} check + {len(plan.heldout_sizes)} "
                                    f"held-out sizes x {len(plan.seeds)} seeds, {len(plan.bench_sizes)} bench sizes")


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--live":
        return live(int(argv[1]) if len(argv) > 1 else 8)
    if len(argv) != 1:
        print(__doc__)
        return 1
    return from_report(argv[0])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
