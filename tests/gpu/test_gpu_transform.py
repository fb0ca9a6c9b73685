"""GPU tier: the "transform" generator's passes verified for real on examples/rowsum and examples/bias_gelu.

Each job runs only ``transform`` (at most 11 candidates after the original, ~1-2 s each on an H200),
so the verifier (spec + held-out sizes, NaN-poisoned outputs, canaries, stress inputs) decides
whether the source passes kept the kernel's results.
"""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ptxfactory.harness.gpu_backend import GpuBackend
from ptxfactory.protocol import Crashed, Measured, TimedOut
from ptxfactory.search.lessons import LessonStore
from ptxfactory.search.strategy import optimise

pytestmark = pytest.mark.gpu

EXAMPLES = Path(__file__).parents[2] / "examples"


def _job(tmp_path: Path, name: str):
    async def go():
        backend, store = GpuBackend(), await LessonStore.open(tmp_path / "lessons.sqlite")
        try:
            return await optimise(EXAMPLES / name / f"{name}.cu", name, backend=backend, store=store,
                                  generators=("transform",), max_candidates=12)
        finally:
            await backend.close()
            await store.close()

    return asyncio.run(go())


def _report(summary) -> str:
    return "\n".join(f"{r.candidate.description}: {r.result.outcome} {getattr(r.result, 'speedup', '')} {r.reason}" for r in summary.rows)


def test_transform_rowsum_shuffle_reduce_verified(tmp_path):
    summary = _job(tmp_path, "rowsum")
    rows = [r for r in summary.rows if r.candidate.generator == "transform"]
    assert len(rows) >= 8, _report(summary)
    assert not [r for r in rows if isinstance(r.result, (Crashed, TimedOut))], _report(summary)
    assert any(isinstance(r.result, Measured) for r in rows), _report(summary)
    shuffle = [r for r in rows if "pass:shuffle_reduce" in r.candidate.params]
    assert shuffle, _report(summary)
    assert all(isinstance(r.result, Measured) for r in shuffle), _report(summary)
    # the exact passes must verify everywhere (they change cache policy, aliasing facts, unrolling, bounds)
    exact = [r for r in rows if set(r.candidate.params) <= {"pass:restrict", "pass:ldg", "pass:ldg_na", "pass:stream", "pass:unroll",
                                                             "pass:launch_bounds", "hint", "unroll"}]
    assert exact and all(isinstance(r.result, Measured) for r in exact), _report(summary)


def test_transform_bias_gelu_grid_stride_verified(tmp_path):
    summary = _job(tmp_path, "bias_gelu")
    rows = [r for r in summary.rows if r.candidate.generator == "transform"]
    assert len(rows) >= 8, _report(summary)
    assert not [r for r in rows if isinstance(r.result, (Crashed, TimedOut))], _report(summary)
    assert any(isinstance(r.result, Measured) for r in rows), _report(summary)
    grid_stride = [r for r in rows if "pass:grid_stride" in r.candidate.params]
    assert grid_stride and all(isinstance(r.result, Measured) for r in grid_stride), _report(summary)
    fast = [r for r in rows if "pass:fast_math" in r.candidate.params]  # tanh.approx.f32 within the spec's 1e-2
    assert fast and all(isinstance(r.result, Measured) for r in fast), _report(summary)
