"""GPU tier: a Python reference as the oracle (examples/rowsum_seq: a sequential fp32 row sum over rows of
10^6, judged against ref.py in float64). A tree-reduction candidate that disagrees with the sequential
original beyond rtol is accepted against the reference (and rejected when the original is the oracle);
a wrong one is refused; a reference that fails at a larger size fails the job with file:line:key.

The numerics behind each assertion are checked on the CPU in tests/unit/test_reference.py (the same
sequential and tree orders in NumPy) and the worker's code path in tests/unit/test_reference_worker.py.
"""
from __future__ import annotations

import asyncio
import functools
import shutil
from pathlib import Path

import pytest

from ptxfactory.harness.compile import Compiled, compile_candidate
from ptxfactory.harness.gpu_backend import GpuBackend
from ptxfactory.harness.plan import make_plan
from ptxfactory.harness.reference import ReferenceFailed, python_reference
from ptxfactory.harness.source import find_kernel
from ptxfactory.protocol import LaunchConfig, Measured, Rejected, load_spec
from ptxfactory.search.strategy import original_candidate

pytestmark = pytest.mark.gpu

EXAMPLE = Path(__file__).parents[2] / "examples" / "rowsum_seq" / "rowsum_seq.cu"
SPEC_PATH = EXAMPLE.with_name("rowsum_seq.cu.toml")
SPEC = load_spec(SPEC_PATH).kernels["rowsum_seq"]
SOURCE = EXAMPLE.read_text()

# One block of 256 threads per row: strided partial sums, then a shared-memory tree (the order of examples/rowsum).
TREE = r"""
extern "C" __global__ void rowsum_seq(const float* x, float* s, int M, int N)
{
    __shared__ float partial[256];
    int row = blockIdx.x;
    if (row >= M) return;
    float sum = 0.0f;
    for (int i = threadIdx.x; i < N; i += blockDim.x) sum += x[(size_t)row * N + i];
    partial[threadIdx.x] = sum;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) s[row] = SCALE partial[0];
}
"""


@functools.cache
def compiled(source: str, description: str, grid: tuple = (), block: tuple = ()) -> Compiled:
    """``source`` as a candidate (its launch ``grid``/``block``, else the original's), compiled once."""
    launch = {k: list(v) for k, v in (("grid", grid), ("block", block)) if v}
    base = original_candidate(SPEC, SOURCE)
    cand = base.model_copy(update={"source": source, "kernel_text": find_kernel(source, "rowsum_seq").text,
                                   "description": description, "generator": "test",
                                   "launch": LaunchConfig(**{**base.launch.model_dump(), **launch})})
    out = compile_candidate(cand, SPEC.arch)
    assert isinstance(out, Compiled), getattr(out, "log", "")
    return out


def original() -> Compiled:
    return compiled(SOURCE, "original kernel")


def tree(wrong: bool = False) -> Compiled:
    return compiled(TREE.replace("SCALE", "1.001f *" if wrong else ""), "block tree" + (", 0.1% off" if wrong else ""),
                    grid=("M",), block=(256,))


def evaluate_all(spec, plan, *candidates):
    async def go():
        backend = GpuBackend()
        try:
            return [await backend.evaluate(spec, original(), c, plan) for c in candidates]
        finally:
            await backend.close()

    return asyncio.run(go())


def plan_for(spec, reference):
    # one bench size: rows of 10^6 (the naive kernel takes ~10-30 ms there)
    return make_plan(spec, secret=7, reference=reference).model_copy(update={"bench_sizes": SPEC.bench.sizes[:1], "timeout_s": 300.0})


def test_a_tree_candidate_disagreeing_with_the_sequential_original_is_accepted_against_the_python_reference():
    reference = python_reference(SPEC, SPEC_PATH)
    plan = plan_for(SPEC, reference)
    base, good, wrong = evaluate_all(SPEC, plan, original(), tree(), tree(wrong=True))
    assert isinstance(base, Measured), base
    assert isinstance(good, Measured), good
    assert len(good.ref_errors) == len(plan.verify_sizes) + len(plan.heldout_sizes)
    long_rows = [e for e in good.ref_errors if e.size["N"] >= 500_000]
    assert long_rows, good.ref_errors
    for e in long_rows:  # closer to the exact sum than the sequential original, by far, and within tolerance
        assert e.within_tol and e.candidate_max_abs * 10 < e.original_max_abs, e
    assert any(not e.within_tol for e in base.ref_errors), "the sequential original itself misses rtol at 10^6"
    assert good.speedup > 2.0, good.speedup  # the original stays the speed baseline
    assert isinstance(wrong, Rejected) and wrong.check == "correctness", wrong
    assert "Python reference" in wrong.reason and wrong.detail["reference"] == "python:ref.py:rowsum"


def test_with_the_original_as_the_oracle_the_same_tree_candidate_is_rejected():
    as_kernel = SPEC.model_copy(update={"check": SPEC.check.model_copy(update={"reference": "kernel"})})
    [result] = evaluate_all(as_kernel, plan_for(as_kernel, None), tree())
    assert isinstance(result, Rejected) and result.check == "correctness", result


def test_a_reference_failing_at_a_larger_size_fails_with_file_line_key(tmp_path: Path):
    for name in ("rowsum_seq.cu", "rowsum_seq.cu.toml"):
        shutil.copy(EXAMPLE.with_name(name), tmp_path / name)
    (tmp_path / "ref.py").write_text("def rowsum(x, s, *, N):\n    if N > 10000:\n        raise MemoryError('too big')\n"
                                     "    return x.sum(axis=1)\n")
    reference = python_reference(SPEC, tmp_path / "rowsum_seq.cu.toml")
    with pytest.raises(ReferenceFailed) as err:
        evaluate_all(SPEC, plan_for(SPEC, reference), tree())
    assert str(err.value).startswith(f"{tmp_path / 'rowsum_seq.cu.toml'}:21: kernel.rowsum_seq.check.reference: "
                                     "python:ref.py:rowsum raised MemoryError: too big")


def test_the_main_job_on_rowsum_seq_finds_a_faster_candidate_and_reports_both_errors(tmp_path: Path):
    from ptxfactory.daemon.report import render_markdown
    from ptxfactory.search.strategy import optimise

    for name in ("rowsum_seq.cu", "rowsum_seq.cu.toml", "ref.py"):
        shutil.copy(EXAMPLE.with_name(name), tmp_path / name)

    async def go():
        backend = GpuBackend()
        try:
            return await optimise(tmp_path / "rowsum_seq.cu", "rowsum_seq", backend=backend, generators=("rowreduce",),
                                  max_candidates=6, use_lessons=False)
        finally:
            await backend.close()

    summary = asyncio.run(go())
    best = summary.row(summary.best_key)
    assert best is not None and isinstance(best.result, Measured), [r.reason for r in summary.rows]
    assert best.result.speedup > 2.0 and best.result.ref_errors
    assert max(e.candidate_max_abs for e in best.result.ref_errors) < max(e.original_max_abs for e in best.result.ref_errors)
    md = render_markdown(summary)
    assert "## Accuracy against the Python reference" in md
    assert "max \\|err\\| vs reference" in md  # the table's verified cell (pipes escaped inside a Markdown cell)


@pytest.mark.parametrize("dtype", ["f32", "bf16", "f64", "i32"])
def test_the_judgement_on_the_device_is_the_judgement_on_the_host(dtype):
    """reference.judge on CuPy arrays (what the worker runs) gives the same Judgement as on NumPy arrays, with NaN,
    infinities, never-written elements and values outside the tolerance mixed in."""
    import cupy as cp
    import numpy as np

    from ptxfactory.harness import reference as R

    rng = np.random.default_rng(3)
    n = 100_003
    ref = rng.normal(size=n) * 10
    if dtype == "i32":
        ref = np.round(ref)
    orig = ref + (0 if dtype == "i32" else rng.normal(size=n) * 1e-5)
    cand = orig.copy()
    cand[17] += 1.0  # outside the tolerance
    unwritten = np.zeros(n, bool)
    unwritten[99] = True
    if dtype != "i32":
        ref[5], orig[5], cand[5] = np.nan, np.nan, np.nan
        ref[6], orig[6], cand[6] = np.inf, np.inf, -np.inf
        ref[7], orig[7], cand[7] = 1.0, 1.0, np.nan
    for rtol, atol in ((1e-3, 1e-3), (0.0, 0.0), (1.0, 2.0)):
        host = R.judge(cand, orig, ref, dtype, rtol, atol, unwritten)
        dev = R.judge(cp.asarray(cand), cp.asarray(orig), cp.asarray(ref), dtype, rtol, atol, cp.asarray(unwritten))
        assert dev == host, (rtol, atol, dev, host)
        assert host.wrong >= 1 and host.first_wrong is not None
