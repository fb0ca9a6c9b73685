"""compute-sanitizer on the job's best candidate: memcheck (racecheck when the kernel uses shared memory, synccheck when
its translation unit uses barriers: :func:`uses_barriers`), once each, at the smallest check size, with the original
kernel run the same way for comparison.

Each run is ``compute-sanitizer --tool TOOL ... python -m ptxfactory.harness.sanitize_run JOB.json`` (:mod:`.sanitize_run`:
one launch on exact-size buffers), a subprocess with an argument list (no shell) and a time limit. The tool is
looked for in ``$PTXFACTORY_SANITIZER`` (a path; ``off`` turns the check off), ``$CUDA_PATH/bin``, ``$CUDA_HOME/bin``,
``PATH``, ``/usr/local/cuda/bin``, ``/usr/local/cuda/compute-sanitizer`` and the ``nvidia`` pip wheels
(``nvidia/cu13/bin``: ``nvidia-cuda-sanitizer-api``).

Verdict (:func:`judge_runs`): the tool missing, or the original's run not reaching its summary line (the tool does
not work on this host: no driver support, no permission, a timeout) makes the check *unavailable*, never a failure
of the job; a tool under which the original itself reports errors is skipped (the user's kernel defines the
contract); otherwise a best with errors is dropped, with the sanitizer's first error as the reason, and the next
best is considered (:func:`vet_best`, called once by the search at the end of a job).
"""
from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ptxfactory.protocol import KernelSpec, Rejected
from ptxfactory.protocol.expr import evaluate

log = logging.getLogger(__name__)

RUN_TIMEOUT_S = 300.0  # one sanitizer run (python start, CuPy import, instrumentation, one launch)
EXIT_ON_ERROR = 86  # --error-exitcode: the tool's exit status when it found errors
PRINT_LIMIT = 10  # errors printed per run: the first is the reason, the summary line counts them all
CHECK = "sanitizer"  # the Rejected.check of a best dropped for sanitizer errors
_PREFIX = re.compile(r"^=+ ?")
_ERROR_SUMMARY = re.compile(r"ERROR SUMMARY:\s*(\d+)\s+errors?")
_RACE_SUMMARY = re.compile(r"RACECHECK SUMMARY:\s*(\d+)\s+hazards?\s+displayed\s*\((\d+)\s+errors?,\s*(\d+)\s+warnings?\)")
_NOT_ERRORS = ("COMPUTE-SANITIZER", "ERROR SUMMARY", "RACECHECK SUMMARY", "LEAK SUMMARY", "Warning:")


def find_sanitizer(env: dict[str, str] | None = None) -> str | None:
    """The ``compute-sanitizer`` executable to use, or None (none found, or ``PTXFACTORY_SANITIZER=off``)."""
    env = os.environ if env is None else env
    chosen = env.get("PTXFACTORY_SANITIZER")
    if chosen:
        return None if chosen.lower() == "off" else (chosen if os.access(chosen, os.X_OK) else None)
    places = [Path(env[v]) / "bin" for v in ("CUDA_PATH", "CUDA_HOME") if env.get(v)]
    found = shutil.which("compute-sanitizer", path=env.get("PATH"))
    if found:
        places.append(Path(found).parent)
    places += [Path("/usr/local/cuda/bin"), Path("/usr/local/cuda/compute-sanitizer")]
    try:
        import nvidia  # the CUDA pip wheels' namespace package

        places += [Path(p) / sub for p in nvidia.__path__ for sub in ("cu13/bin", "cu12/bin", "cuda_sanitizer_api/compute-sanitizer")]
    except ImportError:
        pass
    for place in places:
        exe = place / "compute-sanitizer"
        if os.access(exe, os.X_OK):
            return str(exe)
    return None


TOOLS = ("memcheck", "racecheck", "synccheck")
# barriers in a translation unit: __syncthreads (and _count/_and/_or), __syncwarp, the PTX bar/barrier instructions in
# inline asm, cooperative groups' sync(), CUB's block-wide collectives, cuda::barrier
_BARRIER = re.compile(r"__syncthreads|__syncwarp|__barrier_sync|\bbar(?:rier)?\.(?:sync|arrive|red|warp)\b|"
                      r"cooperative_groups|\bcub(?:/|::)|cuda::barrier|\.sync\s*\(\s*\)")


def uses_barriers(source: str) -> bool:
    """Whether ``source`` (a whole translation unit) may execute a barrier (synccheck's domain). Conservative: a
    barrier in another kernel of the file counts too (synccheck then runs for nothing, which costs only time)."""
    return bool(_BARRIER.search(source))


def sanitizer_command(exe: str, tool: str, job_file: str, python: str = sys.executable) -> list[str]:
    """The argument list of one run of ``tool`` (``memcheck``, ``racecheck`` or ``synccheck``) on the launch described
    by ``job_file``. Raises ValueError for another tool."""
    if tool not in TOOLS:
        raise ValueError(f"unknown sanitizer tool {tool!r}")
    args = [exe, "--tool", tool, "--error-exitcode", str(EXIT_ON_ERROR), "--print-limit", str(PRINT_LIMIT),
            "--show-backtrace", "no", "--check-exit-code", "yes", "--target-processes", "all"]
    if tool == "racecheck":
        args += ["--racecheck-report", "analysis"]
    return args + [python, "-m", "ptxfactory.harness.sanitize_run", job_file]


@dataclass(frozen=True)
class ToolRun:
    """What one sanitizer run said. ``ran``: it reached its summary line (the tool works here); ``errors``: the errors
    it counted (racecheck: errors, not warnings); ``first_error``: the first error record, its head and first details
    on one line; ``problem``: why it did not run (or timed out)."""

    ran: bool
    errors: int = 0
    first_error: str | None = None
    problem: str | None = None
    timed_out: bool = False


def parse_output(text: str, tool: str = "memcheck") -> ToolRun:
    """A :class:`ToolRun` from compute-sanitizer's output (its ``=========``-prefixed lines; other lines ignored)."""
    lines = [_PREFIX.sub("", ln.rstrip()) for ln in text.splitlines() if ln.startswith("=========")]
    error_count = race_errors = None
    records: list[list[str]] = []
    for ln in lines:
        if m := _ERROR_SUMMARY.search(ln):
            error_count = int(m.group(1))
        elif m := _RACE_SUMMARY.search(ln):
            race_errors = int(m.group(2))
        if not ln.strip():
            continue
        if ln[:1].isspace():
            if records:
                records[-1].append(ln.strip())
        elif not ln.startswith(_NOT_ERRORS):
            records.append([ln.strip()])
    if error_count is None and race_errors is None:
        why = records[0][0] if records else "no output from compute-sanitizer"
        return ToolRun(ran=False, problem=why)
    errors = race_errors if tool == "racecheck" and race_errors is not None else error_count
    first = None
    if errors:
        for rec in records:
            if tool != "racecheck" or rec[0].startswith("Error"):
                details = [d for d in rec[1:] if not d.startswith(("Saved host backtrace", "Host Frame", "in "))][:3]
                first = "; ".join([rec[0], *details])[:400]
                break
    return ToolRun(ran=True, errors=errors or 0, first_error=first)


def run_tool(exe: str, tool: str, spec: KernelSpec, cubin: bytes, lowered_name: str, launch: dict, size: dict[str, int],
             timeout_s: float = RUN_TIMEOUT_S, env: dict[str, str] | None = None) -> ToolRun:
    """Run ``tool`` once on one launch of ``cubin`` at ``size`` (files in a private temporary folder, removed after)."""
    from .sanitize_run import write_job

    with tempfile.TemporaryDirectory(prefix="ptxf-sanitize-") as tmp:
        job = write_job(Path(tmp), spec, cubin, lowered_name, launch, size)
        try:
            done = subprocess.run(sanitizer_command(exe, tool, str(job)), capture_output=True, text=True, errors="replace",
                                  timeout=timeout_s, env=env, cwd=tmp)
        except subprocess.TimeoutExpired:
            return ToolRun(ran=False, problem=f"{tool} took more than {timeout_s:.0f} s", timed_out=True)
        except OSError as exc:
            return ToolRun(ran=False, problem=f"could not start {exe}: {exc}")
    return parse_output(done.stdout + "\n" + done.stderr, tool)


def uses_shared_memory(spec: KernelSpec, launch: dict, static_shared: int, size: dict[str, int]) -> bool:
    """Whether the kernel has static shared memory or asks for dynamic shared memory at ``size`` (racecheck's domain)."""
    try:
        dynamic = int(evaluate(launch.get("shared_mem", 0), size))
    except Exception:  # noqa: BLE001: an expression the launch check refuses anyway
        dynamic = 0
    return static_shared > 0 or dynamic > 0


@dataclass
class Verdict:
    """The sanitizer's answer on one best: ``dropped`` (the reason) or not, and notes for the report."""

    dropped: str | None = None
    notes: list[str] = field(default_factory=list)


def judge_runs(tool: str, original: ToolRun, best: ToolRun | None) -> tuple[str | None, str | None, bool]:
    """(drop reason, note, go on with the next tool) for one tool from the original's and the best's runs
    (``best`` None: not run, because the original's run decided)."""
    if not original.ran:
        return None, f"sanitizer unavailable: {original.problem}", False
    if original.errors:
        return None, (f"compute-sanitizer {tool} skipped: the original kernel itself has {original.errors} error(s) "
                      f"({original.first_error})"), True
    if best is None:
        return None, None, True
    if best.errors:
        return f"compute-sanitizer {tool}: {best.errors} error(s); first: {best.first_error}", None, False
    if not best.ran:
        return None, f"compute-sanitizer {tool} inconclusive on the best: {best.problem}", True
    return None, f"compute-sanitizer {tool}: no errors", True


def sanitize_pair(spec: KernelSpec, baseline, best, size: dict[str, int], exe: str | None,
                  timeout_s: float = RUN_TIMEOUT_S, env: dict[str, str] | None = None) -> Verdict:
    """memcheck, racecheck (a best or original that uses shared memory) and synccheck (a best or original whose
    source uses barriers: :func:`uses_barriers`) on ``baseline`` and ``best`` (:class:`~.compile.Compiled`) at
    ``size``. Blocking (run it on a thread)."""
    if exe is None:
        return Verdict(notes=["sanitizer unavailable: compute-sanitizer not found (or PTXFACTORY_SANITIZER=off)"])
    tools = ["memcheck"]
    if any(uses_shared_memory(spec, c.candidate.launch.model_dump(), c.resources.shared_bytes if c.resources else 0, size)
           for c in (baseline, best)):
        tools.append("racecheck")
    if any(uses_barriers(c.candidate.source) for c in (baseline, best)):
        tools.append("synccheck")

    def run(tool: str, c) -> ToolRun:
        return run_tool(exe, tool, spec, c.cubin, c.lowered_name, c.candidate.launch.model_dump(), size, timeout_s, env)

    # The original's memcheck alone first: it says whether the tool works here at all. Then every other (tool,
    # kernel) run at once: each is a process whose time is mostly instrumentation on the CPU, so the wall time is
    # that of the slowest run, not of their sum. The verdict reads them in the sequential order (the original's run
    # of a tool decides whether the best's counts), so it is the verdict of running them in turn.
    probe = run(tools[0], baseline)
    if not probe.ran:
        return Verdict(notes=[judge_runs(tools[0], probe, None)[1]])
    with ThreadPoolExecutor(max_workers=2 * len(tools)) as pool:
        runs = {(tool, who): pool.submit(run, tool, c) for tool in tools for who, c in (("original", baseline), ("best", best))
                if (tool, who) != (tools[0], "original")}
    runs[tools[0], "original"] = Future()
    runs[tools[0], "original"].set_result(probe)
    verdict = Verdict()
    for tool in tools:
        original = runs[tool, "original"].result()
        best_run = runs[tool, "best"].result() if original.ran and not original.errors else None
        drop, note, go_on = judge_runs(tool, original, best_run)
        if note:
            verdict.notes.append(note)
        if drop:
            verdict.dropped = drop
            return verdict
        if not go_on:
            break
    return verdict


async def vet_best(rows: list, best_of: Callable[[list], object], compiled: dict, spec: KernelSpec, baseline, backend,
                   max_dropped: int = 3):
    """The job's best after compute-sanitizer: ``best_of(rows)`` checked by ``backend.sanitize(spec, baseline, best)``
    (a :class:`Verdict`; a backend without ``sanitize`` checks nothing); a best with errors becomes a ``sanitizer``
    :class:`Rejected` row in ``rows`` (in place) and the next best is considered, at most ``max_dropped`` times.
    The kept best's notes (or "sanitizer unavailable: ...") go into its Measured result's ``notes``. ``compiled``:
    candidate key -> the artifact evaluated in this job (a best without one, known from before a restart, is kept
    unchecked)."""
    best = best_of(rows)
    check = getattr(backend, "sanitize", None)
    for _ in range(max_dropped + 1):
        if best is None or check is None or compiled.get(best.candidate.key) is None:
            return best
        verdict: Verdict = await check(spec, baseline, compiled[best.candidate.key])
        i = rows.index(best)
        if verdict.dropped is None:
            for note in verdict.notes:
                log.info("%s: %s", best.candidate.description, note)
            rows[i] = best.model_copy(update={"result": best.result.model_copy(update={"notes": best.result.notes + verdict.notes})})
            return rows[i]
        log.warning("best %s dropped: %s", best.candidate.description, verdict.dropped)
        rows[i] = best.model_copy(update={"result": Rejected(candidate_key=best.candidate.key, check=CHECK, reason=verdict.dropped,
                                                             resources=best.result.resources, wall_s=best.result.wall_s)})
        best = best_of(rows)
    return best
