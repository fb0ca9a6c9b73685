"""The PTX and SASS of a job's candidates, with the hot loop marked: ``ptxfactory show`` and the editor's views.

For any candidate (CUDA or PTX, the original being number 0, numbered as in the report and the code actions):

- **PTX**: a PTX candidate's own module; a CUDA one's PTX from NVRTC (nvcc for what only nvcc compiles),
  cut to the kernel and what it calls (:func:`ptxfactory.harness.static_checks.kernel_ptx`);
- **SASS**: its cubin (compiled again on the CPU, same arch and options) disassembled by ``nvdisasm`` (labels and
  branch targets by name), else ``cuobjdump -sass``; each a subprocess with an argument list and a time limit.

Both have their innermost loops (a branch back to a label above it) marked with comment lines
(:func:`ptxfactory.harness.ptx_ir.mark_hot_loops`) and a header naming the candidate. The job comes from a
``report.json`` (``ptxfactory-out/KERNEL/report.json`` beside the source by default) or from the daemon's job store
(the newest ended job on that file and kernel): no GPU is needed.
"""
from __future__ import annotations

import asyncio
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ptxfactory.protocol import Candidate, CandidateRow, JobSummary

DISASSEMBLE_TIMEOUT_S = 60.0  # one nvdisasm or cuobjdump run, seconds
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


def ptx_of(candidate: Candidate, arch: str) -> str:
    """The candidate's PTX (see the module's docstring).

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


def cubin_of(candidate: Candidate, arch: str) -> bytes:
    """The candidate's cubin, compiled as the job compiled it. Raises ShowError when it does not compile."""
    from ptxfactory.harness.compile import compile_candidate
    from ptxfactory.protocol import CompileFailed

    compiled = compile_candidate(candidate, arch, fast_math_allowed=True)
    if isinstance(compiled, CompileFailed):
        raise ShowError(f"{candidate.description} does not compile: {compiled.log.strip()[:400]}")
    return whole_elf(compiled.cubin)


def whole_elf(cubin: bytes) -> bytes:
    """The cubin padded with zero bytes up to the end of its last header table or section, as its ELF header says.

    cupy's ``nvrtc.getCUBIN`` drops the last byte (it strips a trailing NUL as for PTX text): the driver loads such a
    cubin, but nvdisasm calls it "an invalid ELF file". Anything that is not a 64-bit little-endian ELF is returned as
    it is."""
    import struct

    if len(cubin) < 64 or cubin[:6] != b"\x7fELF\x02\x01":
        return cubin
    phoff, shoff = struct.unpack_from("<QQ", cubin, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", cubin, 0x36)
    end = max(phoff + phentsize * phnum, shoff + shentsize * shnum)
    for i in range(shnum):
        at = shoff + i * shentsize
        if at + 64 > len(cubin):
            break
        kind, = struct.unpack_from("<I", cubin, at + 4)
        offset, size = struct.unpack_from("<QQ", cubin, at + 0x18)
        if kind != 8:  # SHT_NOBITS takes no room in the file
            end = max(end, offset + size)
    return cubin + b"\0" * (end - len(cubin)) if end > len(cubin) and end - len(cubin) < 4096 else cubin


def disassemble(cubin: bytes, timeout_s: float = DISASSEMBLE_TIMEOUT_S) -> str:
    """SASS of a cubin: ``nvdisasm -c`` (code sections only, with labels), else ``cuobjdump -sass``; each run as an
    argument list in a temporary folder, killed after ``timeout_s`` seconds.

    Raises:
        ShowError: neither tool is installed, or the one found fails or times out.
    """
    from ptxfactory.harness.cuda_paths import tool_path

    tools = [(t, args) for t, args in (("nvdisasm", ["-c"]), ("cuobjdump", ["-sass"])) if tool_path(t)]
    if not tools:
        raise ShowError("no nvdisasm or cuobjdump found (CUDA_PATH, CUDA_HOME, PATH, /usr/local/cuda/bin, the "
                        "nvidia-cuda-nvdisasm wheel): install one to see SASS")
    errors = []
    with tempfile.TemporaryDirectory(prefix="ptxfactory-sass-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        for name, args in tools:
            try:
                proc = subprocess.run([tool_path(name), *args, str(path)], capture_output=True, text=True, timeout=timeout_s, cwd=tmp)
            except subprocess.TimeoutExpired:
                errors.append(f"{name} did not finish within {timeout_s:.0f} s")
                continue
            except OSError as exc:
                errors.append(f"{name} could not be run: {exc}")
                continue
            if proc.returncode == 0 and proc.stdout.strip():
                return proc.stdout.replace(str(path), "kernel.cubin")
            errors.append(f"{name} failed (exit code {proc.returncode}): {proc.stderr.strip()[:300]}")
    raise ShowError("; ".join(errors))


_SASS_LABEL = re.compile(r"^\s*(\.L_x_\d+|\.L_\w+)\s*:")
_SASS_BRANCH = re.compile(r"\b(?:BRA|BRX|JMP)\b[^;]*?(?:`\((\.L_\w+)\)|\b(0x[0-9a-fA-F]+)\b)")
_SASS_ADDRESS = re.compile(r"/\*([0-9a-fA-F]{4,})\*/")


def _sass_label(line: str) -> str | None:
    m = _SASS_LABEL.match(line)
    if m:
        return m.group(1)
    a = _SASS_ADDRESS.search(line)  # cuobjdump: no labels, every instruction has its address
    return f"0x{int(a.group(1), 16):x}" if a and not line.lstrip().startswith("//") else None


def _sass_branch(line: str) -> str | None:
    m = _SASS_BRANCH.search(line)
    if not m:
        return None
    return m.group(1) or f"0x{int(m.group(2), 16):x}"


def mark_sass(sass: str) -> str:
    """A SASS listing (nvdisasm's or cuobjdump's) with its innermost loops marked (``//`` comment lines)."""
    from ptxfactory.harness.ptx_ir import mark_hot_loops

    return mark_hot_loops(sass, _sass_label, _sass_branch)


def listing(summary: JobSummary, number: int | None, view: View, arch: str | None = None) -> Listing:
    """The ``view`` (``"ptx"`` or ``"sass"``) of candidate ``number`` of a job (None: its best, else the original).

    Blocking (compiles, runs a disassembler): call it from a thread in the daemon.

    Raises:
        ShowError: see :func:`candidate_row`, :func:`ptx_of`, :func:`cubin_of`, :func:`disassemble`.
    """
    from ptxfactory.harness.ptx_ir import HOT_BEGIN, mark_ptx_hot_loops

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
                raise ShowError(f"{source}: no ended job on {kernel!r} in the job store nor {default}: run "
                                f"`ptxfactory optimise {source} -k {kernel}` first")
            summary = load_report(default)
    if summary.kernel != kernel:
        raise ShowError(f"the job report is about {summary.kernel!r}, not {kernel!r}")
    return summary
