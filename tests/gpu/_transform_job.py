"""What the GPU tests of the transform passes share: a job of the ``transform`` generator alone on a kernel written
to a temporary folder with its spec, and a one-line-per-row account of it for assertion messages."""
from __future__ import annotations

import asyncio
from pathlib import Path

from ptxfactory.harness.gpu_backend import GpuBackend
from ptxfactory.search.lessons import LessonStore
from ptxfactory.search.strategy import optimise


def transform_job(tmp_path: Path, name: str, source: str, spec: str, **options):
    """The JobSummary of ``optimise`` on ``source`` (kernel ``name``) with ``spec`` beside it, transform only, on the GPU.

    ``options`` go to ``optimise`` (``max_candidates``, ``patience``, ...)."""
    path = tmp_path / f"{name}.cu"
    path.write_text(source)
    path.with_name(f"{name}.cu.toml").write_text(spec)

    async def go():
        backend, store = GpuBackend(), await LessonStore.open(tmp_path / "lessons.sqlite")
        try:
            return await optimise(path, name, backend=backend, store=store, generators=("transform",), **options)
        finally:
            await backend.close()
            await store.close()

    return asyncio.run(go())


def describe_rows(summary) -> str:
    """Each row's candidate, outcome, speedup and reason, one per line."""
    return "\n".join(f"{r.candidate.description}: {r.result.outcome} {getattr(r.result, 'speedup', '')} {r.reason}" for r in summary.rows)
