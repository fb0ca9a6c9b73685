"""GPU tier: the "transpose" family on examples/transpose, through the main job (real H200 run).

Every instance is evaluated (14 candidates plus the original, ~1-2 s each); all of them move
bits exactly (the spec's tolerance is zero), at the odd, one-row and one-column sizes too.
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

EXAMPLE = Path(__file__).parents[2] / "examples" / "transpose" / "transpose.cu"


def _family_job(tmp_path, path, name, max_candidates):
    """The JobSummary of the transpose family alone on ``path`` (kernel ``name``), on the GPU."""
    async def go():
        backend, store = GpuBackend(), await LessonStore.open(tmp_path / "lessons.sqlite")
        try:
            return await optimise(path, name, backend=backend, store=store, generators=("transpose",),
                                  max_candidates=max_candidates)
        finally:
            await backend.close()
            await store.close()

    return asyncio.run(go())


def test_transpose_family_on_transpose(tmp_path):
    summary = _family_job(tmp_path, EXAMPLE, "transpose", 20)
    rows = [r for r in summary.rows if r.candidate.generator == "transpose"]
    assert len(rows) >= 12, [r.candidate.description for r in summary.rows]
    assert all(isinstance(r.result, Measured) for r in rows), [
        (r.candidate.description, r.result.outcome, getattr(r.result, "reason", "")) for r in rows if not isinstance(r.result, Measured)
    ]
    best = summary.row(summary.best_key)
    assert best is not None and best.candidate.generator == "transpose", summary.message
    assert best.result.speedup >= 3.0, best.result
    # the % of copy bandwidth is a benchmark's number (bench/results), not a test's: with eight test workers sharing
    # the GPU it read 69.9% on 2026-12-03; here only that it was measured
    square = next(t for t in best.result.timings if t.size == {"M": 8192, "N": 8192})
    assert square.pct_of_copy > 0, square
    # padding the shared tile (no bank conflicts) is not slower than the best unpadded tile at the square size: compared
    # on the candidates' own times there, not on speedups, whose baseline is timed anew for each candidate (with eight
    # workers sharing the GPU on 2026-12-04 the padded best's baseline read 4.4 ms: 9.8x for 150 µs, failing 0.95 x 11.7x)
    at_square = lambda r: next(t.median_us for t in r.result.timings if t.size == {"M": 8192, "N": 8192})  # noqa: E731
    padded = min(at_square(r) for r in rows if r.candidate.params["pad"] == 1)
    assert padded <= min(at_square(r) for r in rows if r.candidate.params["pad"] == 0) * 1.05


TRIALS = Path(__file__).parents[2] / "bench" / "trials"


@pytest.mark.parametrize("name", ["nchw_to_nhwc", "head_split"])
def test_batched_permutations_on_the_trials(tmp_path, name):
    """The N-D reading (axes merged, the rest a batch with their own strides): every instance moves the bits exactly
    (the trials' tolerance is zero) at their check, held-out and bench sizes, judged by their ref.py."""
    import shutil

    for f in (TRIALS / name).iterdir():
        shutil.copy(f, tmp_path / f.name)

    summary = _family_job(tmp_path, tmp_path / f"{name}.cu", name, 16)
    rows = [r for r in summary.rows if r.candidate.generator == "transpose"]
    assert len(rows) >= 12, [r.candidate.description for r in summary.rows]
    assert all(isinstance(r.result, Measured) for r in rows), [
        (r.candidate.description, r.result.outcome, getattr(r.result, "reason", "")) for r in rows if not isinstance(r.result, Measured)
    ]
