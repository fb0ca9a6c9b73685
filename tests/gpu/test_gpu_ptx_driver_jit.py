"""GPU tier: the PTX example's transform job with ptxas hidden (issue 14: the driver-JIT fallback).

ptxas is hidden by monkeypatching the finder (``harness.cuda_paths.tool_path``) and compiling on a thread of this
process (``CompilePool(workers=0)``), so every PTX module reaches the worker as PTX and the CUDA driver JIT-compiles
it at load. Asserted: the job finishes; every row was built by ``"driver"``; the original and at least one other
candidate are verified; their resources are the loaded functions' attributes (registers read from the driver, and
``max_threads_per_block``, which only the driver gives).
"""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ptxfactory.harness import cuda_paths
from ptxfactory.harness.compile_pool import CompilePool
from ptxfactory.harness.gpu_backend import GpuBackend
from ptxfactory.harness.ptx import DRIVER_JIT
from ptxfactory.protocol import Measured
from ptxfactory.search.lessons import LessonStore
from ptxfactory.search.strategy import optimise

pytestmark = pytest.mark.gpu

EXAMPLE = Path(__file__).parents[2] / "examples" / "rowsum_ptx" / "rowsum_ptx.ptx"


def test_transform_job_on_a_ptx_kernel_without_ptxas_verifies_through_the_driver_jit(tmp_path, monkeypatch):
    real = cuda_paths.tool_path
    monkeypatch.setattr(cuda_paths, "tool_path", lambda name: None if name == "ptxas" else real(name))

    async def go():
        backend, store = GpuBackend(), await LessonStore.open(tmp_path / "lessons.sqlite")
        try:
            return await optimise(EXAMPLE, "rowsum_ptx", backend=backend, store=store, generators=("ptx_transform",),
                                  max_candidates=10, use_lessons=False, pool=CompilePool(workers=0))
        finally:
            await backend.close()
            await store.close()

    summary = asyncio.run(go())
    rows = "\n".join(f"{r.candidate.description}: {r.result.outcome} {r.result.compiler} {r.reason}" for r in summary.rows)
    assert summary.state == "finished", summary.message
    assert all(r.result.compiler == DRIVER_JIT for r in summary.rows), rows
    original = summary.row(summary.baseline_key)
    assert isinstance(original.result, Measured), rows
    verified = [r for r in summary.rows if r.key != summary.baseline_key and isinstance(r.result, Measured) and r.verified]
    assert verified, rows
    best = max(verified, key=lambda r: r.result.speedup)  # for the closing note (pytest -s)
    print(f"\n[rowsum_ptx, driver JIT] best verified: {best.candidate.description}: {best.result.speedup:.2f}x "
          f"(interval {best.result.speedup_lo} to {best.result.speedup_hi}); job's best: {summary.message}")
    for row in (original, *verified):
        res = row.result.resources
        assert res is not None and res.registers > 0 and res.max_threads_per_block and res.max_threads_per_block >= 128, (row.candidate.description, res)


def test_the_worker_loads_a_ptx_image_and_names_the_jit_when_it_refuses(monkeypatch):
    """In-process: the example's PTX image loads through the driver (``jit``), with the function's attributes as its
    resources; PTX the driver cannot compile is refused as "the CUDA driver's JIT refused the PTX"."""
    from ptxfactory.harness.compile import compile_candidate
    from ptxfactory.harness.gpu_eval import LoadedKernel
    from ptxfactory.search.strategy import load_job, original_candidate

    real = cuda_paths.tool_path
    monkeypatch.setattr(cuda_paths, "tool_path", lambda name: None if name == "ptxas" else real(name))
    spec, source = load_job(EXAMPLE, "rowsum_ptx")
    image = compile_candidate(original_candidate(spec, source), spec.arch)
    assert image.compiler == DRIVER_JIT
    loaded = LoadedKernel(image.cubin, image.lowered_name, image.candidate.launch)
    assert loaded.jit and loaded.resources.registers > 0 and loaded.resources.max_threads_per_block >= 128
    broken = source.replace("add.f32             %f1, %f1, %f2;", "add.f32             %f1, %f1, %nope;").encode() + b"\0"
    with pytest.raises(RuntimeError, match="the CUDA driver's JIT refused the PTX"):
        LoadedKernel(broken, "rowsum_ptx", image.candidate.launch)
