"""Compile a candidate with NVRTC (through CuPy's bindings) and read its resource usage.

NVRTC runs without a GPU or driver, so this works on CPU-only machines too. The cubin is built
for the spec's real arch (e.g. ``sm_90a``) with ``--ptxas-options=-v``; registers, shared memory,
stack frame and spills are parsed from the ptxas report in the program log.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cupy_backends.cuda.libs import nvrtc

from ptxfactory.protocol import Candidate, CompileFailed, Resources

from .cuda_paths import cuda_include_dirs

# Options a candidate may add; everything else is refused (they are passed to NVRTC, never to a shell).
_ALLOWED_OPTION = re.compile(
    r"^(--use_fast_math|-use_fast_math|--extra-device-vectorization|-maxrregcount=\d{2,3}|--maxrregcount=\d{2,3}"
    r"|--fmad=(true|false)|--ftz=(true|false)|--prec-div=(true|false)|--prec-sqrt=(true|false)|-D[A-Za-z_]\w*(=[\w.+-]+)?)$"
)
FAST_MATH_OPTIONS = ("--use_fast_math", "-use_fast_math", "--ftz=true", "--prec-div=false", "--prec-sqrt=false")


@dataclass(frozen=True)
class Compiled:
    """A compiled candidate: ``cubin`` bytes, the lowered (mangled) kernel name to load, resources, the log."""

    candidate: Candidate
    cubin: bytes
    lowered_name: str
    resources: Resources | None
    log: str


def check_options(options: list[str], fast_math_allowed: bool) -> str | None:
    """Why ``options`` are not acceptable, or None. Fast-math flags need ``check.fast_math = true``."""
    for opt in options:
        if not _ALLOWED_OPTION.match(opt):
            return f"compile option {opt!r} is not allowed"
        if opt in FAST_MATH_OPTIONS and not fast_math_allowed:
            return f"compile option {opt!r} needs check.fast_math = true in the spec"
    return None


def compile_candidate(candidate: Candidate, arch: str, fast_math_allowed: bool = False) -> Compiled | CompileFailed:
    """Compile ``candidate.source`` for ``arch`` (e.g. ``"sm_90a"``).

    Returns:
        :class:`Compiled`, or :class:`~ptxfactory.protocol.CompileFailed` with the NVRTC log for a
        source that does not compile or a refused option. Never raises for bad candidate code.
    """
    bad = check_options(candidate.options, fast_math_allowed)
    if bad:
        return CompileFailed(candidate_key=candidate.key, log=bad)
    opts = [f"-arch={arch}", "-std=c++17", "--ptxas-options=-v"]
    opts += [f"-I{d}" for d in cuda_include_dirs()]
    opts += list(candidate.options)
    prog = nvrtc.createProgram(candidate.source, f"{candidate.kernel_name}.cu", [], [])
    try:
        nvrtc.addNameExpression(prog, candidate.name_expression)
        try:
            nvrtc.compileProgram(prog, opts)
        except nvrtc.NVRTCError:
            return CompileFailed(candidate_key=candidate.key, log=_clean_log(nvrtc.getProgramLog(prog)))
        log = nvrtc.getProgramLog(prog)
        lowered = nvrtc.getLoweredName(prog, candidate.name_expression)
        cubin = nvrtc.getCUBIN(prog)
    finally:
        nvrtc.destroyProgram(prog)
    if "Compiling entry function" not in log:
        # some NVRTC builds keep ptxas's report out of the log: ask ptxas itself (same arch and options)
        log += _ptxas_report(candidate, arch, opts)
    return Compiled(candidate=candidate, cubin=cubin, lowered_name=lowered, resources=parse_ptxas_report(log, lowered), log=log)


def compile_ptx(candidate: Candidate, arch: str) -> str:
    """The candidate's PTX for the virtual arch of ``arch`` (``sm_90a`` -> ``compute_90a``). Raises ``nvrtc.NVRTCError``."""
    opts = ["-std=c++17", f"-arch=compute_{arch[3:]}", *(f"-I{d}" for d in cuda_include_dirs()), *candidate.options]
    prog = nvrtc.createProgram(candidate.source, f"{candidate.kernel_name}.cu", [], [])
    try:
        nvrtc.addNameExpression(prog, candidate.name_expression)  # instantiates a kernel template
        nvrtc.compileProgram(prog, opts)
        ptx = nvrtc.getPTX(prog)
    finally:
        nvrtc.destroyProgram(prog)
    return (ptx.decode() if isinstance(ptx, bytes) else ptx).rstrip("\0")


def _ptxas_report(candidate: Candidate, arch: str, opts: list[str]) -> str:
    """``ptxas -v`` on NVRTC's PTX, or '' when no ptxas is on PATH."""
    ptxas = shutil.which("ptxas")
    if not ptxas:
        return ""
    ptx = compile_ptx(candidate, arch)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.ptx"
        path.write_text(ptx)
        maxreg = [f"--maxrregcount={o.split('=')[1]}" for o in opts if "maxrregcount" in o]
        proc = subprocess.run([ptxas, "-v", f"-arch={arch}", *maxreg, str(path), "-o", str(path.with_suffix(".cubin"))],
                              capture_output=True, text=True, timeout=120)
    return proc.stderr + proc.stdout


def parse_ptxas_report(log: str, entry: str) -> Resources | None:
    """Registers, shared memory, stack frame and spills of ``entry`` from a ``ptxas -v`` report.

    None when the report has no block for ``entry`` (the worker then reads the loaded function's attributes).
    """
    block = None
    for chunk in re.split(r"(?=ptxas info\s+: Compiling entry function)", log):
        if f"'{entry}'" in chunk.split("\n", 1)[0]:
            block = chunk
    if block is None:
        return None

    def num(pattern: str) -> int:
        m = re.search(pattern, block)
        return int(m.group(1)) if m else 0

    return Resources(
        registers=num(r"Used (\d+) registers"),
        shared_bytes=num(r"(\d+) bytes smem"),
        local_bytes=num(r"(\d+) bytes stack frame"),
        spill_stores=num(r"(\d+) bytes spill stores"),
        spill_loads=num(r"(\d+) bytes spill loads"),
    )


def _clean_log(log: str) -> str:
    lines = [ln for ln in log.splitlines() if ln.strip() and not ln.startswith("ptxas")]
    return "\n".join(lines) or log.strip() or "NVRTC failed without a log"
