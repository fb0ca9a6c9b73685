"""``ptxfactory profile``: what a kernel (or a job's candidate) uses and does, as the agents' planner sees it.

For the kernel as written in FILE (or candidate N of the newest job on it, numbered as in the report), compiled for
its spec's arch in the compile pool (:mod:`ptxfactory.harness.compile_pool`):

- resources: ptxas's registers, shared and local memory, spills; the theoretical occupancy (:mod:`ptxfactory.harness.occupancy`)
  at the launch's block size;
- the SASS summary: instruction mix of the whole kernel and of each innermost loop (:func:`ptxfactory.harness.sass.summarise`),
  or why there is none (no nvdisasm or cuobjdump);
- Nsight Compute's counters of one launch at the largest timed size (:mod:`ptxfactory.harness.ncu`), or the reason
  there are none (no GPU, no ncu, counters refused on this host).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ptxfactory.protocol import Candidate, KernelSpec, Resources


class ProfileError(ValueError):
    """Nothing to profile: no spec or kernel, no such candidate, or it does not compile."""


@dataclass(frozen=True)
class Profile:
    """One kernel's profile: ``what`` (a title), the candidate, ``arch``, ptxas's ``resources``, the ``occupancy``
    text, the SASS summary's ``sass`` text (or ``SASS unavailable: ...``), the counters (:class:`~ptxfactory.harness.ncu.Counters`)
    and the ``size`` they were read at."""

    what: str
    candidate: Candidate
    arch: str
    resources: Resources | None
    occupancy: str
    sass: str
    counters: object
    size: dict[str, int]


def _spec(file: Path, kernel: str) -> KernelSpec:
    from ptxfactory.protocol import SpecError, load_spec, spec_path_for

    path = spec_path_for(file)
    if not path.exists():
        raise ProfileError(f"{file}: no spec ({path.name}): write one with `ptxfactory init {file}`")
    try:
        specs = load_spec(path).kernels
    except (SpecError, OSError) as exc:
        raise ProfileError(str(exc)) from None
    if kernel not in specs:
        raise ProfileError(f"{path}: no [kernel.{kernel}] table (it describes {', '.join(sorted(specs)) or 'no kernel'}; "
                           f"`ptxfactory init {file} --kernel NAME` adds one)")
    return specs[kernel]


def _candidate(file: Path, spec: KernelSpec, number: int | None, report: Path | None,
               jobs_path: Path | None) -> tuple[str, Candidate]:
    """(title, candidate): the kernel as written in ``file`` (``number`` None), else the job's candidate ``number``."""
    if number is None:
        from ptxfactory.search.strategy import original_candidate

        try:
            return f"{spec.name} as written in {file.name}", original_candidate(spec, file.read_text())
        except (KeyError, OSError) as exc:
            raise ProfileError(f"{file}: {exc}") from None
    from .show import ShowError, candidate_row, find_summary

    try:
        summary = find_summary(file, spec.name, report, jobs_path)
        number, row = candidate_row(summary, number)
    except ShowError as exc:
        raise ProfileError(str(exc)) from None
    what = "the original" if row.key == summary.baseline_key else f"candidate {number}"
    return f"{what} of {spec.name} ({row.candidate.description}), job {summary.job_id}", row.candidate


def occupancy_text(arch: str, candidate: Candidate, size: dict[str, int], resources: Resources | None) -> str:
    """The theoretical occupancy of ``candidate``'s launch at ``size`` from its resources, or why it is unknown."""
    from ptxfactory.protocol.expr import ExprError, evaluate

    from ptxfactory.harness.occupancy import occupancy

    if resources is None:
        return "unknown (no ptxas report)"
    try:
        threads = 1
        for b in candidate.launch.block:
            threads *= int(evaluate(b, size))
        dynamic = int(evaluate(candidate.launch.shared_mem, size))
    except (ExprError, TypeError, ValueError) as exc:
        return f"unknown (the launch cannot be evaluated: {exc})"
    return occupancy(arch, threads, resources.registers, resources.shared_bytes + dynamic).describe(threads)


def profile(file: Path, kernel: str, number: int | None = None, report: Path | None = None,
            jobs_path: Path | None = None, counters: bool = True) -> Profile:
    """The :class:`Profile` of ``kernel`` in ``file`` (``number``: a job's candidate instead; ``counters`` False: no
    ncu run). Blocking (compiles, disassembles, profiles on the GPU).

    Raises:
        ProfileError: no spec or kernel, no job or no such candidate, or it does not compile.
    """
    from ptxfactory.harness.backend import gpu_available
    from ptxfactory.harness.compile_pool import shared_pool
    from ptxfactory.harness.ncu import Counters, find_ncu, profile_launch, profile_size
    from ptxfactory.harness.sass import SassError, compiled_for, disassemble, summarise

    spec = _spec(file, kernel)
    what, cand = _candidate(file, spec, number, report, jobs_path)
    try:
        compiled = shared_pool().run_blocking(compiled_for, cand, spec.arch)
    except SassError as exc:
        from ptxfactory.harness.compile import source_log

        # the kernel as written compiles as the user's whole file: its errors name that file and its lines
        raise ProfileError(source_log(str(exc), kernel, file.name) if number is None else str(exc)) from None
    try:
        sass = summarise(disassemble(compiled.cubin), compiled.lowered_name).text()
    except SassError as exc:
        sass = f"SASS unavailable: {exc}"
    size = profile_size(spec)
    if not counters:
        found = Counters(problem="not asked for (--no-counters)")
    elif gpu_available() is None:
        found = Counters(problem="no NVIDIA GPU here (NVML finds no driver or device)")
    else:
        found = profile_launch(find_ncu(), spec, compiled.cubin, compiled.lowered_name, cand.launch.model_dump(), size)
    return Profile(what=what, candidate=cand, arch=spec.arch, resources=compiled.resources,
                   occupancy=occupancy_text(spec.arch, cand, size, compiled.resources), sass=sass, counters=found, size=size)
