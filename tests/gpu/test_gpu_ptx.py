"""GPU tier: the main job on a kernel written in PTX (examples/rowsum_ptx), the PTX generators only (issue 14).

Every candidate is assembled by ptxas for the spec's arch and goes through the same verifier as CUDA ones
(check and held-out sizes against ref.py, stress variants, misaligned views, then A/B timing). Asserted: at
least one candidate other than the original is verified (not necessarily faster), every row was built by
ptxas, and the views of ``ptxfactory show`` come out of the finished job without a GPU.
"""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ptxfactory.harness.cuda_paths import tool_path
from ptxfactory.harness.gpu_backend import GpuBackend
from ptxfactory.protocol import Measured
from ptxfactory.search.lessons import LessonStore
from ptxfactory.search.strategy import PTX_GENERATORS, optimise

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(tool_path("ptxas") is None, reason="no ptxas on this machine")]

EXAMPLE = Path(__file__).parents[2] / "examples" / "rowsum_ptx" / "rowsum_ptx.ptx"


def test_main_job_on_a_ptx_kernel_verifies_a_ptx_candidate(tmp_path):
    async def go():
        backend, store = GpuBackend(), await LessonStore.open(tmp_path / "lessons.sqlite")
        try:
            return await optimise(EXAMPLE, "rowsum_ptx", backend=backend, store=store, generators=PTX_GENERATORS,
                                  max_candidates=12, use_lessons=False)
        finally:
            await backend.close()
            await store.close()

    summary = asyncio.run(go())
    assert summary.state == "finished", summary.message
    original = summary.row(summary.baseline_key)
    assert isinstance(original.result, Measured), original.result
    assert {r.candidate.generator for r in summary.rows} <= {"original", *PTX_GENERATORS}
    assert all(r.result.compiler == "ptxas" for r in summary.rows), [(r.candidate.description, r.result.compiler) for r in summary.rows]
    verified = [r for r in summary.rows if r.key != summary.baseline_key and isinstance(r.result, Measured) and r.verified]
    assert verified, [(r.candidate.description, r.reason) for r in summary.rows]
    best = max(verified, key=lambda r: r.result.speedup)  # for the closing note (pytest -s)
    print(f"\n[rowsum_ptx, ptxas] best verified: {best.candidate.description}: {best.result.speedup:.2f}x "
          f"(interval {best.result.speedup_lo} to {best.result.speedup_hi}); job's best: {summary.message}")

    from ptxfactory.daemon.show import listing

    number = summary.rows.index(verified[0])
    ptx = listing(summary, number, "ptx")
    assert "ptxfactory: hot loop begins" in ptx.text and ptx.hot_loops == 1
    if tool_path("nvdisasm") or tool_path("cuobjdump"):
        sass = listing(summary, number, "sass")
        assert "LDG" in sass.text and sass.hot_loops >= 1
