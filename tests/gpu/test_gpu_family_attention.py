"""GPU tier: the "attention" family on the naive attention trial (bench/trials/attn_naive: one thread per query,
D = 64, f32), through the main job, for real: the likeliest variant's candidates (the layout, mask and scale the
source shows) verify against the Python reference and are measured; the other variants, which compute another
function, are rejected by the verifier, never crash. Speeds are printed (-s); the benchmarks judge them."""
from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from ptxfactory.harness.gpu_backend import GpuBackend
from ptxfactory.protocol import Measured
from ptxfactory.search.lessons import LessonStore
from ptxfactory.search.strategy import optimise

pytestmark = pytest.mark.gpu

TRIAL = Path(__file__).parents[2] / "bench" / "trials" / "attn_naive"


def test_attention_family_on_the_naive_trial(tmp_path):
    for f in ("attn_naive.cu", "attn_naive.cu.toml", "ref.py"):
        shutil.copy(TRIAL / f, tmp_path / f)

    async def go():
        backend, store = GpuBackend(), await LessonStore.open(tmp_path / "lessons.sqlite")
        try:
            return await optimise(tmp_path / "attn_naive.cu", "attn_naive", backend=backend, store=store,
                                  generators=("attention",), max_candidates=8, patience=None, use_lessons=False)
        finally:
            await backend.close()
            await store.close()

    summary = asyncio.run(go())
    rows = [r for r in summary.rows if r.candidate.generator == "attention"]
    report = [(r.candidate.description, r.result.outcome, getattr(r.result, "speedup", None), r.reason) for r in rows]
    print("\n" + "\n".join(map(str, report)))
    assert rows, summary.message
    assert all(r.result.outcome not in ("crashed", "timed_out", "compile_failed") for r in rows), report
    likely = [r for r in rows if (r.candidate.params["layout"], r.candidate.params["causal"]) == ("bhtd", 0)]
    assert likely and all(isinstance(r.result, Measured) for r in likely), report
    assert all(r.result.outcome == "rejected" for r in rows if r.candidate.params["causal"] == 1), report
