"""The PTX and SASS of a job's candidates, with the hot loop marked: ``ptxfactory show`` and the editor's views.

For any candidate (CUDA or PTX, the original being number 0, numbered as in the report and the code actions):

- **PTX**: a PTX candidate's own module; a CUDA one's PTX from NVRTC (nvcc for what only nvcc compiles),
  cut to the kernel and what it calls (:func:`ptxfactory.harness.static_checks.kernel_ptx`);
- **SASS**: its cubin (compiled again on the CPU, same arch and options) disassembled by ``nvdisasm`` (labels and
  branch targets by name), else ``cuobjdump -sass``; each a subprocess with an argument list and a time limit
  (:mod:`ptxfactory.harness.sass`).

Compilation (NVRTC) runs in the compile pool's processes (:mod:`ptxfactory.harness.compile_pool`), never in the
daemon: its memory stays out of the daemon's resident set.

Both have their innermost loops (a branch back to a label above it) marked with comment lines
(:func:`ptxfactory.harness.ptx_ir.mark_hot_loops`) and a header naming the candidate. The job comes from a
``report.json`` (``ptxfactory-out/KERNEL/report.json`` beside the source by default) or from the daemon's job store
(the newest ended job on that file and kernel): no GPU is needed.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ptxfactory.protocol import Candidate, CandidateRow, JobSummary

View = Literal["ptx", "sass"]


class ShowError(ValueError):
    """What to show cannot be found or made: no job, no such candidate, it does not compile, no disassembler."""


@dataclass(frozen=True)
class Listing:
    """One view of one candidate: ``text`` (header comment lines first), the candidate ``number`` and ``view``."""

    number: int
    view: View
    text: str
    hot_loops: int


def _spec_arch(summary: JobSummary) -> str:
    """The arch the job compiled for: its spec's (read again; ``sm_90a`` when the spec is gone)."""
    from ptxfactory.protocol import SpecError, load_spec, spec_path_for

    try:
        spec = load_spec(spec_path_for(summary.source_path)).kernels.get(summary.kernel)
    except (SpecError, OSError):
        spec = None
    return spec.arch if spec is not None else "sm_90a"


def candidate_row(summary: JobSummary, number: int | None) -> tuple[int, CandidateRow]:
    """The row numbered ``number`` (rows in job order, the original first: 0), or the best (the original when none).

    Raises:
        ShowError: no such number.
    """
    rows = summary.rows
    if number is None:
        best = summary.row(summary.best_key)
        number = rows.index(best) if best is not None else next((i for i, r in enumerate(rows) if r.key == summary.baseline_key), 0)
    if not 0 <= number < len(rows):
        raise ShowError(f"job {summary.job_id} has candidates 0 to {len(rows) - 1}, not {number}")
    return number, rows[number]


def kernel_ptx_of(candidate: Candidate, arch: str) -> str:
    """The candidate's PTX (see the module's docstring). Blocking (NVRTC): :func:`ptx_of` runs it in the compile pool.

    Raises:
        ShowError: the candidate does not compile to PTX any more (the message has the compiler's first lines).
    """
    from ptxfactory.harness.compile import compile_ptx
    from ptxfactory.harness.ptx import is_ptx
    from ptxfactory.harness.static_checks import kernel_ptx

    if is_ptx(candidate.source):
        return candidate.source
    try:
        return kernel_ptx(compile_ptx(candidate, arch), candidate.kernel_name)
    except Exception as exc:  # noqa: BLE001: NVRTCError and whatever nvcc's fallback raises
        raise ShowError(f"cannot make the PTX of {candidate.description}: {str(exc).strip()[:400]}") from None


def ptx_of(candidate: Candidate, arch: str) -> str:
    """:func:`kernel_ptx_of`, compiled in the compile pool's processes (never in the daemon). Raises ShowError."""
    from ptxfactory.harness.compile_pool import shared_pool

    return shared_pool().run_blocking(kernel_ptx_of, candidate, arch)


def cubin_of(candidate: Candidate, arch: str) -> bytes:
    """The candidate's cubin, compiled as the job compiled it, in the compile pool's processes (never in the daemon).
    Raises ShowError when it does not compile."""
    from ptxfactory.harness.compile_pool import shared_pool
    from ptxfactory.harness.sass import SassError, compiled_for

    try:
        return shared_pool().run_blocking(compiled_for, candidate, arch).cubin
    except SassError as exc:
        raise ShowError(str(exc)) from None


def disassemble(cubin: bytes) -> str:
    """SASS of a cubin (:func:`ptxfactory.harness.sass.disassemble`). Raises ShowError: no disassembler, or it failed."""
    from ptxfactory.harness.sass import SassError
    from ptxfactory.harness.sass import disassemble as run_disassembler

    try:
        return run_disassembler(cubin)
    except SassError as exc:
        raise ShowError(str(exc)) from None


def listing(summary: JobSummary, number: int | None, view: View, arch: str | None = None) -> Listing:
    """The ``view`` (``"ptx"`` or ``"sass"``) of candidate ``number`` of a job (None: its best, else the original).

    Blocking (compiles, runs a disassembler): call it from a thread in the daemon.

    Raises:
        ShowError: see :func:`candidate_row`, :func:`ptx_of`, :func:`cubin_of`, :func:`disassemble`.
    """
    from ptxfactory.harness.ptx_ir import HOT_BEGIN, mark_ptx_hot_loops
    from ptxfactory.harness.sass import mark_sass

    number, row = candidate_row(summary, number)
    arch = arch or _spec_arch(summary)
    cand = row.candidate
    if view == "ptx":
        body = mark_ptx_hot_loops(ptx_of(cand, arch))
    else:
        body = mark_sass(disassemble(cubin_of(cand, arch)))
    loops = body.count(HOT_BEGIN.split("{")[0])
    what = "the original" if row.key == summary.baseline_key else f"candidate {number}"
    header = [
        f"// ptxfactory: {view.upper()} of {what} of {summary.kernel} ({cand.description}), {arch}, job {summary.job_id}",
        f"// launch {cand.launch.describe()}; options: {' '.join(cand.options) or 'none'}; "
        f"{loops} innermost loop{'s' if loops != 1 else ''} marked; read-only",
    ]
    return Listing(number=number, view=view, text="\n".join(header) + "\n" + body.rstrip("\n") + "\n", hot_loops=loops)


def report_json_path(source: Path, kernel: str) -> Path:
    """Where ``ptxfactory optimise`` writes the job's ``report.json`` by default."""
    return source.parent / "ptxfactory-out" / kernel / "report.json"


def load_report(path: Path) -> JobSummary:
    """A job summary from a ``report.json``. Raises ShowError (``FILE: message``) when it cannot be read."""
    try:
        return JobSummary.model_validate_json(path.read_text())
    except OSError as exc:
        raise ShowError(f"{path}: cannot read it: {exc.strerror}") from None
    except ValueError as exc:
        raise ShowError(f"{path}: not a job report: {str(exc).splitlines()[0]}") from None


async def stored_summary(jobs_path: Path, source: Path, kernel: str) -> JobSummary | None:
    """The newest ended job on (``source``, ``kernel``) in the job store at ``jobs_path`` (read-only); None without one."""
    from .jobs import path_key
    from .jobstore import JobStore

    if not jobs_path.exists():
        return None
    store = await JobStore.open(jobs_path, read_only=True)
    try:
        job = await store.latest_with_summary(path_key(source), kernel)
    finally:
        await store.close()
    return job.summary if job is not None else None


def find_summary(source: Path, kernel: str, report: Path | None = None, jobs_path: Path | None = None) -> JobSummary:
    """The job to show: ``report`` when given; else the job store's newest ended job on the file and kernel; else
    the default ``report.json``.

    Raises:
        ShowError: none of them has a job on that kernel.
    """
    if report is not None:
        summary = load_report(report)
    else:
        summary = None
        if jobs_path is not None:
            try:
                summary = asyncio.run(stored_summary(jobs_path, source, kernel))
            except Exception:  # noqa: BLE001: an unreadable store falls back on report.json
                summary = None
        if summary is None:
            default = report_json_path(source, kernel)
            if not default.exists():
                _known_kernel(source, kernel)
                raise ShowError(f"{source}: no ended job on {kernel!r} in the job store nor {default}: run "
                                f"`ptxfactory optimise {source} -k {kernel}` first")
            summary = load_report(default)
    if summary.kernel != kernel:
        raise ShowError(f"the job report is about {summary.kernel!r}, not {kernel!r}")
    return summary


def _known_kernel(source: Path, kernel: str) -> None:
    """Raises :class:`ShowError` naming the file's kernels when ``source`` has none called ``kernel`` (an unreadable
    or unparsable file passes: the caller's own message follows)."""
    from ptxfactory.harness.source import find_kernels

    try:
        names = [k.name for k in find_kernels(Path(source).read_text())]
    except Exception:  # noqa: BLE001: whatever the file holds, the job's absence is the message then
        return
    if names and kernel not in names:
        raise ShowError(f"{source} has no kernel {kernel!r} (found: {', '.join(names)})")
