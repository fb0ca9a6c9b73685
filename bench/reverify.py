"""Re-verify candidates of a finished job under several fresh plans (new seeds, new held-out sizes), on the GPU.

A candidate that passes one plan and fails another is fragile: its failure depends on the inputs or the sizes drawn.
This runs the rows named from a job's ``report.json`` against the original, each under ``--plans`` plans, and prints
every outcome with the held-out sizes that plan drew, so the failing size or seed can be read off.
Usage (on the GPU machine): ``python3 bench/reverify.py REPORT.json FILE.cu --kernel NAME --rows 11,3 [--plans 8]``.
"""
from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from ptxfactory.harness.compile import Compiled, compile_candidate
from ptxfactory.harness.gpu_backend import GpuBackend
from ptxfactory.harness.plan import make_plan
from ptxfactory.harness.reference import python_reference
from ptxfactory.protocol import Candidate, Measured, load_spec, spec_path_for
from ptxfactory.search.strategy import original_candidate


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report", type=Path)
    ap.add_argument("source", type=Path)
    ap.add_argument("--kernel", required=True)
    ap.add_argument("--rows", required=True, help="row numbers of the report's table, comma-separated")
    ap.add_argument("--plans", type=int, default=8)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    spec = load_spec(spec_path_for(a.source)).kernels[a.kernel]
    reference = python_reference(spec, spec_path_for(a.source))  # None where the original kernel is the oracle
    baseline = compile_candidate(original_candidate(spec, a.source.read_text()), spec.arch, spec.check.fast_math)
    assert isinstance(baseline, Compiled), getattr(baseline, "log", baseline)
    rows = json.loads(a.report.read_text())["rows"]
    backend, out = GpuBackend(), []
    try:
        for n in (int(x) for x in a.rows.split(",")):
            cand = Candidate.model_validate(rows[n]["candidate"])
            compiled = compile_candidate(cand, spec.arch, spec.check.fast_math)
            assert isinstance(compiled, Compiled), getattr(compiled, "log", compiled)
            for k in range(a.plans):
                plan = make_plan(spec, secret=k, reference=reference)
                r = await backend.evaluate(spec, baseline, compiled, plan)
                line = {"row": n, "secret": k, "heldout": [dict(s) for s in plan.heldout_sizes], "outcome": r.outcome,
                        "speedup": round(r.speedup, 3) if isinstance(r, Measured) else None,
                        "check": getattr(r, "check", None), "reason": getattr(r, "reason", None)}
                print(json.dumps(line), flush=True)
                out.append(line)
    finally:
        await backend.close()
    if a.out:
        a.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    asyncio.run(main())
