"""The main job: parse, check, generate, compile ahead, evaluate, record, keep the best.

One round of every generator on the original kernel, then a round of ``tune`` on the best
verified candidate. Duplicates (same :attr:`Candidate.key`) are never evaluated twice.
"""
from __future__ import annotations

import asyncio
import hashlib
import re
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ptxfactory.harness.backend import EvaluationBackend
from ptxfactory.harness.compile import Compiled, compile_candidate
from ptxfactory.harness.plan import make_plan
from ptxfactory.harness.source import check_signature, find_kernel
from ptxfactory.harness.static_checks import static_check
from ptxfactory.protocol import (
    Candidate, CandidateRow, CompileFailed, EvalResult, JobSummary, KernelSpec, LaunchConfig, Measured, NotRun, Rejected, load_spec,
    spec_path_for,
)

from .base import GenContext
from .generators import load as load_generator
from .lessons import LessonStore

DEFAULT_GENERATORS = ("rowwise", "tune")


class JobError(RuntimeError):
    """The job cannot start: unreadable source, unknown kernel, signature mismatch, original does not compile."""


@dataclass(frozen=True)
class Progress:
    """One step of a job: ``done`` of ``total`` candidates, a message, and the row just finished (if any)."""

    done: int
    total: int
    message: str
    row: CandidateRow | None = None


def original_candidate(spec: KernelSpec, source: str) -> Candidate:
    """The user's kernel as a candidate, with the spec's launch. Raises ``KeyError`` when the kernel is missing."""
    kdef = find_kernel(source, spec.name)
    return Candidate(
        kernel_name=spec.name, source=source, kernel_text=kdef.text, generator="original", description="original kernel",
        launch=LaunchConfig(grid=spec.launch.grid, block=spec.launch.block, shared_mem=spec.launch.shared_mem),
    )


def kernel_fingerprint(kernel_text: str) -> str:
    """Hash of the kernel's text with comments and whitespace removed (16 hex digits)."""
    text = re.sub(r"//[^\n]*|/\*.*?\*/", "", kernel_text, flags=re.S)
    return hashlib.sha256(" ".join(text.split()).encode()).hexdigest()[:16]


def load_job(source_path: str | Path, kernel: str, source_text: str | None = None) -> tuple[KernelSpec, str]:
    """Read the source (or use ``source_text``, e.g. an editor buffer) and its spec; check the signature.

    Raises:
        SpecError: the spec is malformed (file, line, key).
        JobError: the source is unreadable, the kernel is missing from source or spec, or the signature differs.
    """
    path = Path(source_path)
    if source_text is None:
        try:
            source_text = path.read_text()
        except OSError as exc:
            raise JobError(f"{path}: cannot read source: {exc.strerror}") from None
    spec_file = load_spec(spec_path_for(path))
    if kernel not in spec_file.kernels:
        raise JobError(f"{spec_file.path}: no [kernel.{kernel}] table (spec has: {', '.join(spec_file.kernels)})")
    spec = spec_file.kernels[kernel]
    try:
        check_signature(spec, find_kernel(source_text, kernel))
    except KeyError as exc:
        raise JobError(f"{path}: {exc.args[0]}") from None
    except ValueError as exc:
        raise JobError(f"{path}: {spec_file.path} does not match the kernel: {exc}") from None
    return spec, source_text


async def optimise(
    source_path: str | Path,
    kernel: str,
    *,
    backend: EvaluationBackend | None,
    store: LessonStore | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    generators: tuple[str, ...] = DEFAULT_GENERATORS,
    max_candidates: int = 64,
    job_id: str | None = None,
    cancel: asyncio.Event | None = None,
    source_text: str | None = None,
    known: Mapping[str, EvalResult] | None = None,
    on_row: Callable[[CandidateRow], Awaitable[None]] | None = None,
) -> JobSummary:
    """Run the main job on ``kernel`` in ``source_path`` (spec at ``<source>.toml``).

    With ``backend=None`` (no GPU) every candidate is compiled and its resources reported, none is
    run, and the summary's state is ``"compile_only"``. Every evaluated candidate is recorded in
    ``store``. Progress is reported through ``on_progress`` (called on the event loop thread).

    Resuming: ``known`` maps candidate keys to results already measured (e.g. before a daemon
    restart); those candidates are recorded with their known result and never evaluated again
    (generators are deterministic, so the same candidates come back). ``on_row`` is awaited with
    every new row, before it counts as done: the place to persist it.

    Raises:
        SpecError, JobError: see :func:`load_job`; JobError also when the original does not compile.
    """
    job_id = job_id or uuid.uuid4().hex[:12]
    spec, source = load_job(source_path, kernel, source_text)
    kdef = find_kernel(source, kernel)
    original = original_candidate(spec, source)
    notify = on_progress or (lambda p: None)
    compile_ = lambda c: asyncio.to_thread(compile_candidate, c, spec.arch, spec.check.fast_math)  # noqa: E731

    notify(Progress(0, 1, f"compiling the original {kernel}"))
    baseline = await compile_(original)
    if isinstance(baseline, CompileFailed):
        raise JobError(f"{source_path}: the original kernel does not compile:\n{baseline.log}")

    fingerprint = kernel_fingerprint(original.kernel_text)
    facts = await backend.facts() if backend else None
    plan = make_plan(spec)
    seen: set[str] = set()
    rows: list[CandidateRow] = []

    def propose(parent: Candidate, names: tuple[str, ...], priors: dict[str, float]) -> list[Candidate]:
        ctx = GenContext(spec=spec, source=parent.source, kernel=find_kernel(parent.source, kernel), original=parent, priors=priors)
        out = []
        for name in names:
            for cand in load_generator(name).propose(ctx):
                if cand.key not in seen and len(seen) < max_candidates:
                    seen.add(cand.key)
                    out.append(cand)
        return out

    kernel_class = _kernel_class(GenContext(spec=spec, source=source, kernel=kdef, original=original))
    priors = await store.priors(kernel_class, spec.arch) if store else {}
    seen.add(original.key)
    queue = [original] + propose(original, generators, priors)
    total = len(queue)

    known = dict(known or {})

    async def record(cand: Candidate, result) -> CandidateRow:
        row = CandidateRow(candidate=cand, result=result)
        rows.append(row)
        if on_row is not None:
            await on_row(row)
        if store:
            await store.record(job_id=job_id, kernel_fingerprint=fingerprint, kernel_class=kernel_class, arch=spec.arch,
                               candidate=cand, result=result, gpu=facts)
        notify(Progress(len(rows), total, _row_message(row), row))
        return row

    async def run(batch: list[Candidate]) -> bool:
        todo = [c for c in batch if c.key not in known]
        ahead: dict[str, asyncio.Future] = {}

        def compile_next() -> None:  # the next candidate compiles on a CPU thread while this one is on the GPU
            if todo:
                cand = todo.pop(0)
                ahead[cand.key] = asyncio.ensure_future(compile_(cand))

        compile_next()
        for cand in batch:
            if cand.key in known:  # measured before a restart: keep the result, skip the work
                rows.append(CandidateRow(candidate=cand, result=known[cand.key]))
                notify(Progress(len(rows), total, _row_message(rows[-1]), rows[-1]))
                continue
            compiled = await ahead.pop(cand.key)
            compile_next()
            if cancel is not None and cancel.is_set():
                for fut in ahead.values():
                    fut.cancel()
                return False
            await record(cand, await outcome(cand, compiled))
        return True

    async def outcome(cand: Candidate, compiled: Compiled | CompileFailed) -> EvalResult:
        """Cheapest refusal first: compile error, static checks (not for the original), then the GPU."""
        if isinstance(compiled, CompileFailed):
            return compiled
        finding = None if cand.key == original.key else static_check(cand, spec, compiled.resources, compiled.cubin)
        if finding is not None:
            return Rejected(candidate_key=cand.key, check=finding.check, reason=finding.reason, resources=compiled.resources)
        if backend is None:
            return NotRun(candidate_key=cand.key, resources=compiled.resources, reason="no NVIDIA GPU on this machine")
        return await _evaluate(backend, spec, baseline, compiled, plan, rows)

    state = "finished" if backend else "compile_only"
    if not await run(queue):
        state = "cancelled"
    elif backend is not None and "tune" in generators:
        best = _best(rows, original.key)
        if best is not None:
            more = propose(best.candidate, ("tune",), priors)
            total += len(more)
            if not await run(more):
                state = "cancelled"

    best = _best(rows, original.key)
    summary = JobSummary(
        job_id=job_id, source_path=str(source_path), kernel=kernel, state=state, gpu=facts, rows=rows,
        baseline_key=original.key, best_key=best.candidate.key if best else None,
        message=_summary_message(state, best),
    )
    notify(Progress(len(rows), max(total, len(rows)), summary.message))
    return summary


def _kernel_class(ctx: GenContext) -> str:
    """``rowwise_norm`` when the row-wise normalisation family applies to the kernel, else ``generic``."""
    try:
        return "rowwise_norm" if load_generator("rowwise").propose(ctx) else "generic"
    except ImportError:
        return "generic"


REVERIFY_FACTOR = 10.0


async def _evaluate(backend: EvaluationBackend, spec: KernelSpec, baseline: Compiled, compiled: Compiled, plan, rows):
    """Evaluate; a result more than 10x faster than the best so far is re-verified on new seeds and held-out sizes."""
    result = await backend.evaluate(spec, baseline, compiled, plan)
    if not isinstance(result, Measured):
        return result
    best_so_far = max((r.result.speedup for r in rows if isinstance(r.result, Measured)), default=1.0)
    if result.speedup <= REVERIFY_FACTOR * max(best_so_far, 1.0):
        return result
    again = await backend.evaluate(spec, baseline, compiled, make_plan(spec))
    if isinstance(again, Measured):
        return result
    if isinstance(again, Rejected):
        return again.model_copy(update={"check": f"reverify_{again.check}",
                                        "reason": f"{result.speedup:.1f}x claimed, then failed on new seeds: {again.reason}"})
    return again


def _best(rows: list[CandidateRow], baseline_key: str) -> CandidateRow | None:
    faster = [r for r in rows if isinstance(r.result, Measured) and r.candidate.key != baseline_key and r.result.speedup > 1.0]
    return max(faster, key=lambda r: r.result.speedup, default=None)


def _row_message(row: CandidateRow) -> str:
    if isinstance(row.result, Measured):
        return f"{row.candidate.description}: {row.result.speedup:.2f}x"
    return f"{row.candidate.description}: {row.reason}"


def _summary_message(state: str, best: CandidateRow | None) -> str:
    if state == "compile_only":
        return "compiled every candidate; nothing was run (no NVIDIA GPU)"
    if state == "cancelled":
        return "cancelled"
    if best is None:
        return "no verified candidate was faster than the original"
    how = "simulated, NOT verified" if best.result.simulated else "verified"
    return f"best: {best.candidate.description}, {best.result.speedup:.2f}x faster ({how})"
