"""What the GPU tests of the transform passes share: a job of the ``transform`` generator alone on a kernel written
to a temporary folder with its spec, and a one-line-per-row account of it for assertion messages."""
from __future__ import annotations

import asyncio
from pathlib import Path

from ptxfactory.harness.gpu_backend import GpuBackend
from ptxfactory.search.generators.transform import TransformGenerator
from ptxfactory.search.lessons import LessonStore
from ptxfactory.search.strategy import optimise


class KeptTransform(TransformGenerator):
    """The transform generator with only the proposals from the original that ``keep(candidate)`` accepts (none
    from a later best): a test of some passes evaluates those, whatever order the search's scores would have put
    them in (a job of every proposal would not fit the tier's time, and which come first within a budget is the
    search's business, not the pass's)."""

    def __init__(self, keep):
        super().__init__()
        self.keep = keep
        self.proposed = False

    def propose(self, ctx):
        if self.proposed:
            return []
        self.proposed = True
        return [c for c in super().propose(ctx) if self.keep(c)]


def kept_transform(monkeypatch, keep) -> None:
    """Make the jobs of this test load :class:`KeptTransform` (``keep``) as ``transform``, its proposals not capped
    (the cap would cut the list before ``keep`` chooses from it)."""
    import ptxfactory.search.generators.transform as transform
    import ptxfactory.search.strategy as strategy

    monkeypatch.setattr(transform, "MAX_CANDIDATES", 1000)
    monkeypatch.setattr(strategy, "load_generator", lambda name: KeptTransform(keep))


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
