"""Benchmark: the original kernel against itself (A/A) through the main job's decision rule, on the GPU.

For each example: one evaluation of the original against itself is the job's A/A row (its interval is
the noise); then ``--runs`` more, each treated as a candidate. A run "wins" when the job would report it
as significantly faster (:meth:`Measured.significant` against the A/A row's interval). The issue's bar:
never. Usage (on the GPU machine): ``python3 bench/aa_check.py --runs 20 examples/rmsnorm/rmsnorm.cu:rmsnorm ...``
"""
from __future__ import annotations

import argparse
import asyncio
import datetime
import json
from pathlib import Path

from ptxfactory.harness.compile import Compiled, compile_candidate
from ptxfactory.harness.gpu_backend import GpuBackend
from ptxfactory.harness.plan import make_plan
from ptxfactory.protocol import Measured, load_spec, spec_path_for
from ptxfactory.search.strategy import original_candidate


async def check(backend: GpuBackend, cu: Path, kernel: str, runs: int) -> dict:
    spec = load_spec(spec_path_for(cu)).kernels[kernel]
    compiled = compile_candidate(original_candidate(spec, cu.read_text()), spec.arch, spec.check.fast_math)
    assert isinstance(compiled, Compiled), getattr(compiled, "log", compiled)
    plan = make_plan(spec)
    aa = await backend.evaluate(spec, compiled, compiled, plan)
    assert isinstance(aa, Measured), aa
    speedups, wins = [], 0
    for _ in range(runs):
        r = await backend.evaluate(spec, compiled, compiled, make_plan(spec))
        assert isinstance(r, Measured), r
        speedups.append((round(r.speedup, 4), round(r.speedup_lo, 4), round(r.speedup_hi, 4)))
        wins += r.significant(aa.speedup_hi)
    return {"example": f"{cu.parent.name}:{kernel}", "aa_row": [aa.speedup, aa.speedup_lo, aa.speedup_hi],
            "runs": runs, "significant_wins": wins, "speedups_lo_hi": speedups}


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("targets", nargs="+", help="FILE.cu:KERNEL")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    backend = GpuBackend()
    try:
        facts = await backend.facts()
        results = []
        for t in a.targets:
            cu, kernel = t.rsplit(":", 1)
            res = await check(backend, Path(cu), kernel, a.runs)
            print(json.dumps({k: v for k, v in res.items() if k != "speedups_lo_hi"}))
            results.append(res)
    finally:
        await backend.close()
    doc = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "gpu": facts.model_dump(), "results": results}
    if a.out:
        a.out.write_text(json.dumps(doc, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
