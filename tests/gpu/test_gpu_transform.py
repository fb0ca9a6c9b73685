"""GPU tier: the "transform" generator's passes verified for real on examples/rowsum and examples/bias_gelu.

Each job runs only ``transform`` (at most 15 candidates after the original, ~1-2 s each on an H200), and only
the proposals that hold the passes under test (:class:`_transform_job.KeptTransform`), so the verifier (spec +
held-out sizes, NaN-poisoned outputs, canaries, stress inputs) decides whether those source passes kept the
kernel's results, whichever candidates the search would have tried first.
"""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ptxfactory.harness.gpu_backend import GpuBackend
from ptxfactory.protocol import Crashed, Measured, TimedOut
from ptxfactory.search.lessons import LessonStore
from ptxfactory.search.strategy import optimise

from _transform_job import kept_transform

pytestmark = pytest.mark.gpu

EXAMPLES = Path(__file__).parents[2] / "examples"


def _job(tmp_path: Path, name: str):
    async def go():
        backend, store = GpuBackend(), await LessonStore.open(tmp_path / "lessons.sqlite")
        try:
            return await optimise(EXAMPLES / name / f"{name}.cu", name, backend=backend, store=store,
                                  generators=("transform",), max_candidates=16, patience=None)
        finally:
            await backend.close()
            await store.close()

    return asyncio.run(go())


def _report(summary) -> str:
    return "\n".join(f"{r.candidate.description}: {r.result.outcome} {getattr(r.result, 'speedup', '')} {r.reason}" for r in summary.rows)


# the passes that change cache policy, aliasing facts, unrolling, bounds: exact, they must verify everywhere
EXACT = {"pass:restrict", "pass:ldg", "pass:ldg_na", "pass:stream", "pass:unroll", "pass:launch_bounds", "hint", "unroll"}


def _holding(*passes: str):
    """Keep a proposal whose knobs are exact passes' or start with one of ``passes`` (a pass or its knobs)."""
    return lambda c: all(k in EXACT or k.startswith(passes) for k in c.params)


def test_transform_rowsum_shuffle_reduce_verified(tmp_path, monkeypatch):
    kept_transform(monkeypatch, _holding("pass:shuffle_reduce", "pass:vector_loops", "vec"))
    summary = _job(tmp_path, "rowsum")
    rows = [r for r in summary.rows if r.candidate.generator == "transform"]
    assert len(rows) >= 5, _report(summary)  # (of the 9 kept, ldg, launch_bounds and restrict+ldg compile to binaries seen)
    assert not [r for r in rows if isinstance(r.result, (Crashed, TimedOut))], _report(summary)
    assert any(isinstance(r.result, Measured) for r in rows), _report(summary)
    shuffle = [r for r in rows if "pass:shuffle_reduce" in r.candidate.params]
    assert shuffle, _report(summary)
    assert all(isinstance(r.result, Measured) for r in shuffle), _report(summary)
    exact = [r for r in rows if set(r.candidate.params) <= EXACT]
    assert exact and all(isinstance(r.result, Measured) for r in exact), _report(summary)


def test_transform_bias_gelu_grid_stride_verified(tmp_path, monkeypatch):
    kept_transform(monkeypatch, _holding("pass:grid_stride", "grid_cap", "pass:divmod", "pass:fast_math", "math", "fast_math_ops"))
    summary = _job(tmp_path, "bias_gelu")
    rows = [r for r in summary.rows if r.candidate.generator == "transform"]
    # of the 9 kept (divmod now comes only after vector_loops, which this filter leaves out), ldg, launch_bounds and
    # restrict+ldg compile to binaries seen
    assert len(rows) >= 6, _report(summary)
    assert not [r for r in rows if isinstance(r.result, (Crashed, TimedOut))], _report(summary)
    assert any(isinstance(r.result, Measured) for r in rows), _report(summary)
    grid_stride = [r for r in rows if "pass:grid_stride" in r.candidate.params]
    assert grid_stride and all(isinstance(r.result, Measured) for r in grid_stride), _report(summary)
    fast = [r for r in rows if "pass:fast_math" in r.candidate.params]  # tanh.approx.f32 within the spec's 1e-2
    assert fast and all(isinstance(r.result, Measured) for r in fast), _report(summary)


VEC_KERNEL = """#include <cuda_bf16.h>
extern "C" __global__ void fma2(const __nv_bfloat16* x, const __nv_bfloat16* b, __nv_bfloat16* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = __float2bfloat16(__bfloat162float(x[i]) * 2.0f + __bfloat162float(b[i]));
    }
}
"""
VEC_SPEC = """[kernel.fma2]
arch = "sm_90a"
args = [
  { name = "x", role = "in", dtype = "bf16", shape = ["N"], init = "normal" },
  { name = "b", role = "in", dtype = "bf16", shape = ["N"], init = "normal" },
  { name = "y", role = "out", dtype = "bf16", shape = ["N"] },
  { name = "n", role = "scalar", dtype = "i32", value = "N" },
]
launch = { grid = ["cdiv(N, 256)"], block = [256], shared_mem = 0, policy = "free" }

[kernel.fma2.check]
reference = "kernel"
rtol = 0.0
atol = 0.0
seeds = 2
sizes = [{ N = 1 }, { N = 7 }, { N = 1000 }, { N = 4099 }]

[kernel.fma2.bench]
metric = "geomean_time"
sizes = [{ N = 67108864 }]
"""


# Mixed precision: a float input beside the bf16 ones (16-byte loads of x, 8-byte of b and y, four elements a thread)
VEC_MIXED = (VEC_KERNEL.replace("const __nv_bfloat16* x", "const float* x").replace("__bfloat162float(x[i])", "x[i]"),
             VEC_SPEC.replace('name = "x", role = "in", dtype = "bf16"', 'name = "x", role = "in", dtype = "f32"'))


@pytest.mark.parametrize("kernel, spec", [(VEC_KERNEL, VEC_SPEC), VEC_MIXED], ids=["bf16", "f32_bf16_mixed"])
def test_transform_vectorize_is_bit_exact_and_faster(tmp_path, kernel, spec):
    """The vectorize pass on a 1-D bf16 elementwise kernel, and on a mixed-precision one: every vectorized candidate
    verified bit for bit (rtol = atol = 0; odd sizes take the scalar tail) and faster than the scalar original."""
    source = tmp_path / "fma2.cu"
    source.write_text(kernel)
    source.with_name("fma2.cu.toml").write_text(spec)

    async def go():
        backend, store = GpuBackend(), await LessonStore.open(tmp_path / "lessons.sqlite")
        try:
            return await optimise(source, "fma2", backend=backend, store=store, generators=("transform",), max_candidates=16, patience=None)
        finally:
            await backend.close()
            await store.close()

    summary = asyncio.run(go())
    vectorized = [r for r in summary.rows if r.candidate.params.get("pass:vectorize")]
    assert vectorized, _report(summary)
    assert all(isinstance(r.result, Measured) for r in vectorized), _report(summary)
    assert max(r.result.speedup for r in vectorized) > 1.1, _report(summary)
