"""GPU tier: the "elementwise" family on examples/bias_gelu, through the main job (real H200 run).

Every instance is evaluated (18 candidates plus the original, ~1-2 s each): the family proposes only the epilogue
the source shows, GELU (tanh), and its instances compute the example's function within its tolerance, tanhf or
tanh.approx.f32 alike.
"""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ptxfactory.harness.gpu_backend import GpuBackend
from ptxfactory.protocol import Measured
from ptxfactory.search.lessons import LessonStore
from ptxfactory.search.strategy import optimise

pytestmark = pytest.mark.gpu

EXAMPLE = Path(__file__).parents[2] / "examples" / "bias_gelu" / "bias_gelu.cu"


def test_elementwise_family_on_bias_gelu(tmp_path):
    async def go():
        backend, store = GpuBackend(), await LessonStore.open(tmp_path / "lessons.sqlite")
        try:
            return await optimise(EXAMPLE, "bias_gelu", backend=backend, store=store, generators=("elementwise",), max_candidates=23)
        finally:
            await backend.close()
            await store.close()

    summary = asyncio.run(go())
    rows = [r for r in summary.rows if r.candidate.generator == "elementwise"]
    assert len(rows) >= 18, [r.candidate.description for r in summary.rows]
    assert not [r for r in rows if r.result.outcome in ("crashed", "timed_out", "compile_failed")], [
        (r.candidate.description, r.result.outcome) for r in rows if r.result.outcome != "measured"
    ]
    gelu = [r for r in rows if r.candidate.params["epilogue"] == "gelu_tanh"]
    assert gelu and all(isinstance(r.result, Measured) for r in gelu), [
        (r.candidate.description, getattr(r.result, "reason", "")) for r in gelu if not isinstance(r.result, Measured)
    ]
    # the family proposes only the epilogue the source shows (since 2026-12-05: no identity or relu instances that
    # could only fail verification), so every row is a GELU
    assert {r.candidate.params["epilogue"] for r in rows} == {"gelu_tanh"}, [r.candidate.description for r in rows]
    best = summary.row(summary.best_key)
    assert best is not None and best.candidate.generator == "elementwise", summary.message
    assert best.result.speedup >= 2.0, best.result
    main = next(t for t in best.result.timings if t.size == {"M": 32768, "N": 4096})
    assert main.pct_of_copy >= 70.0, main
