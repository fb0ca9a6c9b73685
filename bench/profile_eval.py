"""Where a candidate's evaluation spends its time (GPU machine): the worker's code in this process, under cProfile.

``python3 bench/profile_eval.py examples/l2norm_rows/l2norm_rows.cu:l2norm_rows [--top 25]``

Evaluates, with an in-process :class:`ptxfactory.harness.gpu_eval.Evaluator` and the job's plan (the spec's Python
reference included), the original against itself (opening the session: not counted) and then the transform
generator's first proposal against the original, twice: the first (cold: the reference's outputs and the timing
inputs are made) and the second (warm) evaluation are profiled separately. Prints each one's wall time split into
verification and timing, and the functions with the most cumulative and own time.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", help="FILE:KERNEL (a .cu file with its .cu.toml spec)")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    path, kernel = args.target.rsplit(":", 1)

    from ptxfactory.harness.compile import compile_candidate
    from ptxfactory.harness.gpu_eval import Evaluator
    from ptxfactory.harness.plan import make_plan
    from ptxfactory.harness.reference import python_reference
    from ptxfactory.harness.source import find_kernel
    from ptxfactory.protocol import load_spec
    from ptxfactory.search.base import GenContext
    from ptxfactory.search.generators.transform import TransformGenerator
    from ptxfactory.search.strategy import original_candidate

    source = Path(path).read_text()
    spec_path = Path(path + ".toml")
    spec = load_spec(spec_path).kernels[kernel]
    plan = make_plan(spec, 7, python_reference(spec, spec_path))
    original = original_candidate(spec, source)
    base = compile_candidate(original, spec.arch)
    ev = Evaluator()
    facts = ev.facts()
    ctx = GenContext(spec=spec, source=source, kernel=find_kernel(source, kernel), original=original, facts=facts)
    proposals = TransformGenerator().propose(ctx)
    if not proposals:
        print("the transform generator proposes nothing for", kernel)
        return 1
    cand = compile_candidate(proposals[0], spec.arch)
    lb = ev.load(base.cubin, base.lowered_name, original.launch, original.key)
    lc = ev.load(cand.cubin, cand.lowered_name, cand.candidate.launch, cand.candidate.key)
    t0 = time.perf_counter()
    first = ev.evaluate(spec, lb, original.key, lb, plan, original.key)
    print(f"original vs itself: {time.perf_counter() - t0:.2f} s ({first.outcome})")
    for label in ("cold", "warm"):
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        res = ev.evaluate(spec, lb, original.key, lc, plan, cand.candidate.key)
        prof.disable()
        wall = time.perf_counter() - t0
        print(f"\n== {cand.candidate.description} ({label}): {res.outcome}, {wall:.2f} s; verify {getattr(res, 'verify_s', 0) or 0:.2f} s, "
              f"Python reference {getattr(res, 'reference_s', 0) or 0:.2f} s, speedup {getattr(res, 'speedup', float('nan')):.2f}x")
        for key in ("cumulative", "tottime"):
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).sort_stats(key).print_stats(args.top)
            print(f"-- by {key}")
            print("\n".join(line for line in buf.getvalue().splitlines() if line.strip())[:6000])
    ev.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
