"""GPU tier: the eight naive examples no family knows (issue 12: l2norm_rows, xent_fwd, standardize_rows,
rope, sgd_momentum, swiglu, stencil5, row_argmax), each judged against its Python reference (ref.py,
float64) through the harness, as the main job does: every check and held-out size, the four stress
variants, then timing.

The original passes (as the speed baseline it must), and it is within the spec's tolerance of the
reference everywhere except where its spec says it is not: the running fp32 sums of l2norm_rows and
xent_fwd drift past the tolerance on rows of ~10^5 and more (judged there as "no less accurate than the
original"), so for them within-tolerance is asserted on rows up to 10^4. The numerics behind these
expectations are emulated on the CPU in tests/unit/test_examples_naive.py.

row_argmax is judged exactly: a warp-per-row candidate that reduces in another order and breaks ties by
the smaller index passes (exactness is fair), one that keeps the last index on ties is refused.
"""
from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest

from ptxfactory.harness.compile import Compiled, compile_candidate
from ptxfactory.harness.gpu_backend import GpuBackend
from ptxfactory.harness.plan import make_plan
from ptxfactory.harness.reference import python_reference
from ptxfactory.harness.source import find_kernel
from ptxfactory.protocol import LaunchConfig, Measured, Rejected, load_spec
from ptxfactory.search.strategy import original_candidate

pytestmark = pytest.mark.gpu

EXAMPLES = Path(__file__).parents[2] / "examples"
# every CUDA example judged against a Python reference (its ref.py), the ones added later included, but rowsum_seq,
# whose sequential fp32 original is less accurate than its reference by design (tests/gpu/test_python_reference.py)
NAIVE = tuple(sorted(d.name for d in EXAMPLES.iterdir()
                     if (d / "ref.py").is_file() and (d / f"{d.name}.cu").is_file() and d.name != "rowsum_seq"))
# where the naive kernel's own order is expected within tolerance: rows up to this length (symbol, limit)
WITHIN_TOL_UP_TO = {"l2norm_rows": ("N", 10_000), "xent_fwd": ("V", 10_000)}


def _load(name: str):
    cu = EXAMPLES / name / f"{name}.cu"
    spec_path = cu.with_name(f"{name}.cu.toml")
    return load_spec(spec_path).kernels[name], spec_path, cu.read_text()


def _compile(spec, source: str, grid: list | None = None, block: list | None = None, description: str = "original") -> Compiled:
    base = original_candidate(spec, source)
    cand = base
    if source != base.source or grid or block:
        launch = {**base.launch.model_dump(), **({"grid": grid} if grid else {}), **({"block": block} if block else {})}
        cand = base.model_copy(update={"source": source, "kernel_text": find_kernel(source, spec.name).text,
                                       "description": description, "generator": "test", "launch": LaunchConfig(**launch)})
    out = compile_candidate(cand, spec.arch, spec.check.fast_math)
    assert isinstance(out, Compiled), getattr(out, "log", "")
    return out


def _evaluate(spec, baseline: Compiled, candidates: list[Compiled], plan):
    async def go():
        backend = GpuBackend()
        try:
            return [await backend.evaluate(spec, baseline, c, plan) for c in candidates]
        finally:
            await backend.close()

    return asyncio.run(go())


def _plan(spec, spec_path: Path, timing_reps: int = 3):
    """The job's plan with the spec's Python reference (every check and held-out size, the stress variants),
    timed briefly at the bench size that moves the fewest bytes: this file is about verification."""
    smallest = min(spec.bench.sizes, key=spec.bytes_moved_at)
    plan = make_plan(spec, secret=11, reference=python_reference(spec, spec_path))
    return plan.model_copy(update={"bench_sizes": [smallest], "timing_reps": timing_reps, "timeout_s": 300.0})


@pytest.mark.parametrize("name", NAIVE)
def test_the_original_passes_against_its_python_reference(name: str):
    spec, spec_path, source = _load(name)
    plan = _plan(spec, spec_path)
    original = _compile(spec, source)
    [result] = _evaluate(spec, original, [original], plan)
    assert isinstance(result, Measured), result
    outputs = [a.name for a in spec.args if a.role in ("out", "inout")]
    assert {e.output for e in result.ref_errors} == set(outputs)
    assert len(result.ref_errors) == (len(plan.verify_sizes) + len(plan.heldout_sizes)) * len(outputs), result.ref_errors
    limit = WITHIN_TOL_UP_TO.get(name)
    checked = 0
    for e in result.ref_errors:
        assert math.isfinite(e.candidate_max_abs), e
        # the same code, the same bits; but float atomics (dot_atomic, deterministic = false) add in another order each run
        assert e.candidate_max_abs == e.original_max_abs or not spec.check.deterministic, e
        if limit is None or e.size[limit[0]] <= limit[1]:
            checked += 1
            assert e.within_tol, f"{name}: the original is outside rtol/atol of ref.py at {e.size} ({e.output}: " \
                                 f"max |err| {e.candidate_max_abs:.3g})"
    assert checked >= len(outputs) * 3
    if name == "row_argmax":  # exact: the max and the first index holding it
        assert all(e.candidate_max_abs == 0 for e in result.ref_errors), result.ref_errors


# A warp per row: each lane scans a strided part of the row, then a shuffle tree; the smaller index wins ties.
ARGMAX_WARP = r"""
extern "C" __global__ void row_argmax(const float* x, float* vmax, int* imax, int M, int N)
{
    int row = blockIdx.x * 4 + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= M) return;
    const float* xr = x + (size_t)row * N;
    float best = __int_as_float(0xff800000);  // -inf
    int arg = 0x7fffffff;
    for (int i = lane; i < N; i += 32) {
        float v = xr[i];
        if (v CMP best) { best = v; arg = i; }
    }
    for (int off = 16; off > 0; off /= 2) {
        float ob = __shfl_down_sync(0xffffffffu, best, off);
        int oa = __shfl_down_sync(0xffffffffu, arg, off);
        if (ob > best || (ob == best && oa TIE arg)) { best = ob; arg = oa; }
    }
    if (lane == 0) { vmax[row] = best; imax[row] = arg; }
}
"""


def test_row_argmax_exactness_is_fair_to_another_order_and_refuses_the_last_index_on_ties():
    spec, spec_path, source = _load("row_argmax")
    plan = _plan(spec, spec_path, timing_reps=10)
    original = _compile(spec, source)
    warp = dict(grid=["cdiv(M, 4)"], block=[128])
    first = _compile(spec, ARGMAX_WARP.replace("CMP", ">").replace("TIE", "<"), description="warp per row", **warp)
    last = _compile(spec, ARGMAX_WARP.replace("CMP", ">=").replace("TIE", ">"), description="warp per row, last on ties", **warp)
    good, bad = _evaluate(spec, original, [first, last], plan)
    assert isinstance(good, Measured), good
    assert all(e.within_tol and e.candidate_max_abs == 0 for e in good.ref_errors), good.ref_errors
    assert good.speedup > 1.2, good.speedup  # 32 threads per row instead of one
    assert isinstance(bad, Rejected) and bad.check == "correctness", bad
