"""Compile a candidate with NVRTC (through CuPy's bindings), or nvcc where NVRTC cannot, and read its resource usage.

NVRTC runs without a GPU or driver, so this works on CPU-only machines too. The cubin is built
for the spec's real arch (e.g. ``sm_90a``) with ``--ptxas-options=-v``; registers, shared memory,
stack frame and spills are parsed from the ptxas report in the program log. NVRTC gets the
toolkit's and CCCL's include folders and shims for the C standard headers it lacks
(:mod:`.cuda_paths`). A source it still cannot compile (a header it has not got, host code it refuses
in "JIT mode") goes through ``nvcc`` when one is installed: same arch, ``-cubin``, ``-Xptxas -v``, an
argument list (never a shell), a time limit; :attr:`Compiled.compiler` says which compiler built it.

A ptxas error (the front end passed, the assembler refused the PTX, typically inline PTX with an
operand of the wrong kind) is kept verbatim in the log, preceded by a ``FILE(LINE): error: ptxas: ...``
line at the source line that produced the PTX line ptxas names (from the ``.loc`` directives of
the PTX built with ``-lineinfo``): the ``asm`` statement for inline PTX.
"""
from __future__ import annotations

import ctypes
import logging
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from cupy_backends.cuda.libs import nvrtc

from ptxfactory.protocol import Candidate, CompileFailed, Resources

from .cuda_paths import PRELUDE, nvcc_path, nvrtc_include_dirs
from .elf import entry_names
from .ptx import compile_ptx_candidate, is_ptx

log = logging.getLogger(__name__)

# Options a candidate may add; everything else is refused (they are passed to NVRTC, never to a shell).
_ALLOWED_OPTION = re.compile(
    r"^(--use_fast_math|-use_fast_math|--extra-device-vectorization|-maxrregcount=\d{2,3}|--maxrregcount=\d{2,3}"
    r"|--fmad=(true|false)|--ftz=(true|false)|--prec-div=(true|false)|--prec-sqrt=(true|false)|-D[A-Za-z_]\w*(=[\w.+-]+)?)$"
)
FAST_MATH_OPTIONS = ("--use_fast_math", "-use_fast_math", "--ftz=true", "--prec-div=false", "--prec-sqrt=false")
NVCC_TIMEOUT_S = 120.0  # one nvcc run (front end, cicc, ptxas), seconds
# NVRTC messages that nvcc (with the host compiler's headers, host code allowed) may well not give
_NVRTC_ONLY = re.compile(r"cannot open source file|JIT mode|not allowed in JIT|host (function|variable)s? (are|is) not allowed")
_PTXAS_ERROR = re.compile(r"^ptxas\b[^\n]*?, line (\d+); (error|warning)\s*: (.*)$", re.M)


@dataclass(frozen=True)
class Compiled:
    """A compiled candidate: ``cubin`` bytes, the lowered (mangled) kernel name to load, resources, the log,
    the ``compiler`` that built it (``"nvrtc"``, ``"nvcc"`` for a source NVRTC could not compile, ``"ptxas"`` for
    PTX, or ``"driver"`` for PTX left to the driver's JIT where no ptxas was found: then ``cubin`` is the PTX image,
    NUL-terminated text, and ``resources`` None; see :func:`ptxfactory.harness.ptx.driver_jit_candidate`), and for
    the user's original, its float64 ``shadow`` where one was built (:func:`ptxfactory.harness.shadow.shadow_compiled`)."""

    candidate: Candidate
    cubin: bytes
    lowered_name: str
    resources: Resources | None
    log: str
    compiler: str = "nvrtc"
    shadow: Compiled | None = None  # an original's float64 shadow (harness/shadow.py), which the verifier may consult


def check_options(options: list[str], fast_math_allowed: bool) -> str | None:
    """Why ``options`` are not acceptable, or None. Fast-math flags need ``check.fast_math = true``."""
    for opt in options:
        if not _ALLOWED_OPTION.match(opt):
            return f"compile option {opt!r} is not allowed"
        if opt in FAST_MATH_OPTIONS and not fast_math_allowed:
            return f"compile option {opt!r} needs check.fast_math = true in the spec"
    return None


def compile_candidate(candidate: Candidate, arch: str, fast_math_allowed: bool = False,
                      compiler: str = "auto") -> Compiled | CompileFailed:
    """Compile ``candidate.source`` for ``arch`` (e.g. ``"sm_90a"``).

    ``compiler``: ``"auto"`` (NVRTC; nvcc when NVRTC fails on what only it lacks: a header, host code),
    ``"nvrtc"`` or ``"nvcc"`` (that one only).

    Returns:
        :class:`Compiled`, or :class:`~ptxfactory.protocol.CompileFailed` with the compiler's log for a
        source that does not compile or a refused option (a ptxas error verbatim, after a
        ``FILE(LINE): error: ptxas: ...`` line at the source line it comes from). Never raises for bad
        candidate code.
    """
    if is_ptx(candidate.source):  # a PTX module: ptxas (harness/ptx.py)
        return compile_ptx_candidate(candidate, arch)
    bad = check_options(candidate.options, fast_math_allowed)
    if bad:
        return CompileFailed(candidate_key=candidate.key, log=bad)
    if compiler == "nvcc":
        return _compile_nvcc(candidate, arch)
    out = _compile_nvrtc(candidate, arch)
    if isinstance(out, Compiled) or compiler == "nvrtc" or not _NVRTC_ONLY.search(out.log):
        return out
    if nvcc_path() is None:
        return CompileFailed(candidate_key=candidate.key, log=out.log + "\n(no nvcc found through CUDA_PATH, CUDA_HOME, PATH or "
                             "/usr/local/cuda to compile what NVRTC cannot)")
    via_nvcc = _compile_nvcc(candidate, arch)
    if isinstance(via_nvcc, CompileFailed):
        first = next((ln for ln in out.log.splitlines() if "error" in ln), out.log.splitlines()[0] if out.log else "")
        return CompileFailed(candidate_key=candidate.key, log=f"{via_nvcc.log}\n(nvcc, after NVRTC failed: {first.strip()})",
                             compiler="nvcc")
    return via_nvcc


_PRELUDE_MACROS = re.compile(r"\b(INFINITY|NAN|HUGE_VALF?)\b")  # what harness/include/ptxf_prelude.h defines


def _nvrtc_options(arch: str, candidate: Candidate, lineinfo: bool = False) -> list[str]:
    """NVRTC's options for the candidate: ``-arch`` (a real arch such as ``sm_90a``: a cubin, with ptxas's resource
    report; a virtual one such as ``compute_90a``: PTX only), the include dirs, the prelude where the source needs
    it, ``-lineinfo``, then the candidate's own options. Every NVRTC compile of a candidate (its cubin, its line
    table, the PTX the static checks scan) goes through here, so all see the same translation unit."""
    opts = [f"-arch={arch}", "-std=c++17"] + (["--ptxas-options=-v"] if arch.startswith("sm_") else [])
    opts += [f"-I{d}" for d in nvrtc_include_dirs()]
    if _PRELUDE_MACROS.search(candidate.source):  # INFINITY and NAN without an #include, as under nvcc
        opts.append(f"--pre-include={PRELUDE}")
    return opts + (["-lineinfo"] if lineinfo else []) + list(candidate.options)


def _compile_nvrtc(candidate: Candidate, arch: str) -> Compiled | CompileFailed:
    opts = _nvrtc_options(arch, candidate)
    prog = nvrtc.createProgram(candidate.source, f"{candidate.kernel_name}.cu", [], [])
    try:
        nvrtc.addNameExpression(prog, candidate.name_expression)
        try:
            nvrtc.compileProgram(prog, opts)
        except nvrtc.NVRTCError:
            log = _clean_log(nvrtc.getProgramLog(prog))
            if _PTXAS_ERROR.search(log):
                log = _nvrtc_ptxas_failure(candidate, arch)
            return CompileFailed(candidate_key=candidate.key, log=log)
        log = nvrtc.getProgramLog(prog).replace("\0", "")
        lowered = nvrtc.getLoweredName(prog, candidate.name_expression)
        cubin = nvrtc_cubin(prog)
    finally:
        nvrtc.destroyProgram(prog)
    if "Compiling entry function" not in log:
        # some NVRTC builds keep ptxas's report out of the log: ask ptxas itself (same arch and options)
        log += _ptxas_report(candidate, arch, opts)
    return Compiled(candidate=candidate, cubin=cubin, lowered_name=lowered, resources=parse_ptxas_report(log, lowered), log=log)


@lru_cache(maxsize=1)
def _nvrtc_library() -> ctypes.CDLL:
    """The NVRTC library CuPy has loaded (``libnvrtc.so.MAJOR``, found among the loaded ones, never loaded anew: a
    program handle belongs to the library that made it)."""
    major = nvrtc.getVersion()[0]
    return ctypes.CDLL(f"libnvrtc.so.{major}", mode=os.RTLD_NOLOAD | os.RTLD_LAZY)


def nvrtc_cubin(prog: int) -> bytes:
    """The whole cubin of a compiled NVRTC program (``prog``: CuPy's program handle), every byte of it.

    CuPy's ``nvrtc.getCUBIN`` returns one byte fewer than ``nvrtcGetCUBINSize`` says (it strips a trailing NUL as
    for PTX text, but a cubin is binary: the byte dropped is the end of its last ELF table, and nvdisasm then calls
    the file "an invalid ELF file"); so the two C functions are called here, on the library CuPy loaded.

    Raises:
        nvrtc.NVRTCError: NVRTC refuses.
        ValueError: it made no cubin (compiled for a virtual arch, ``compute_XX``).
    """
    try:
        lib = _nvrtc_library()
    except (OSError, AttributeError) as exc:  # not the library's usual name: CuPy's bytes, which the driver loads
        log.warning("NVRTC's library not found by name (%s): cubins come from CuPy's getCUBIN, one byte short", exc)
        return nvrtc.getCUBIN(prog)
    size = ctypes.c_size_t()
    status = lib.nvrtcGetCUBINSize(ctypes.c_void_p(prog), ctypes.byref(size))
    if status == 0 and size.value <= 1:
        raise ValueError("NVRTC made no cubin (a virtual arch, compute_XX, was given rather than sm_XX)")
    if status == 0:
        buf = ctypes.create_string_buffer(size.value)
        status = lib.nvrtcGetCUBIN(ctypes.c_void_p(prog), buf)
    if status != 0:
        raise nvrtc.NVRTCError(status)
    return buf.raw


def _nvrtc_ptxas_failure(candidate: Candidate, arch: str) -> str:
    """The log of a compilation that ptxas refused, made again with ``-lineinfo`` (so that the PTX carries
    ``.loc`` directives and ptxas's line numbers refer to it), with each ptxas error mapped to its source line."""
    name = f"{candidate.kernel_name}.cu"
    prog = nvrtc.createProgram(candidate.source, name, [], [])
    try:
        nvrtc.addNameExpression(prog, candidate.name_expression)
        try:
            nvrtc.compileProgram(prog, _nvrtc_options(arch, candidate, lineinfo=True))
            return "ptxas failed without -lineinfo and passed with it"  # not seen; never an empty log
        except nvrtc.NVRTCError:
            log = _clean_log(nvrtc.getProgramLog(prog))
    finally:
        nvrtc.destroyProgram(prog)
    try:
        ptx = compile_ptx(candidate, arch, lineinfo=True)
    except Exception:
        return log
    return map_ptxas_errors(log, ptx, name)


def map_ptxas_errors(log: str, ptx: str, source_name: str) -> str:
    """``log`` with a ``SOURCE(LINE): error: ptxas: MESSAGE (PTX line N: INSTRUCTION)`` line before it for each
    ptxas error (``..., line N; error : MESSAGE``) whose PTX line follows a ``.loc`` directive of ``source_name``:
    the source line of the statement that produced it (for inline PTX, the ``asm`` statement). ``ptx`` is the
    PTX that ptxas read, built with ``-lineinfo``; errors in other files (headers) are named with their file.
    The ptxas lines themselves are kept verbatim."""
    lines = ptx.splitlines()
    files = {m.group(1): Path(m.group(2)).name for m in re.finditer(r'^\s*\.file\s+(\d+)\s+"([^"]*)"', ptx, re.M)}
    mapped = []
    for m in _PTXAS_ERROR.finditer(log):
        n, severity, message = int(m.group(1)), m.group(2), m.group(3).strip()
        if not 1 <= n <= len(lines):
            continue
        instruction = " ".join(lines[n - 1].split())
        for i in range(n - 1, -1, -1):
            loc = re.match(r"\s*\.loc\s+(\d+)\s+(\d+)\s+\d+", lines[i])
            if loc:
                where = files.get(loc.group(1), "")
                if where == source_name:
                    mapped.append(f"{source_name}({loc.group(2)}): {severity}: ptxas: {message} (PTX line {n}: {instruction})")
                else:
                    mapped.append(f"ptxas {severity}: {message} (PTX line {n}: {instruction}; from {where or '?'} line {loc.group(2)})")
                break
    return "\n".join([*mapped, log]) if mapped else log


def compile_ptx(candidate: Candidate, arch: str, lineinfo: bool = False) -> str:
    """The candidate's PTX for the virtual arch of ``arch`` (``sm_90a`` -> ``compute_90a``), with ``.loc``
    directives when ``lineinfo``. NVRTC, or nvcc for a source only nvcc compiles (see :func:`compile_candidate`).

    Raises:
        nvrtc.NVRTCError: NVRTC cannot compile it and nvcc is absent or cannot either.

    A candidate written in PTX is its own PTX (its source, returned as it is).
    """
    if is_ptx(candidate.source):
        return candidate.source
    opts = _nvrtc_options(f"compute_{arch[3:]}", candidate, lineinfo)
    prog = nvrtc.createProgram(candidate.source, f"{candidate.kernel_name}.cu", [], [])
    try:
        nvrtc.addNameExpression(prog, candidate.name_expression)  # instantiates a kernel template
        try:
            nvrtc.compileProgram(prog, opts)
        except nvrtc.NVRTCError:
            if not _NVRTC_ONLY.search(nvrtc.getProgramLog(prog)) or nvcc_path() is None:
                raise
            ptx = _nvcc(candidate, arch, "-ptx", lineinfo)[2]
            if ptx is None:
                raise
            return ptx
        ptx = nvrtc.getPTX(prog)
    finally:
        nvrtc.destroyProgram(prog)
    return (ptx.decode() if isinstance(ptx, bytes) else ptx).rstrip("\0")


def _nvcc_source(candidate: Candidate) -> str:
    """The translation unit nvcc compiles: a kernel template's instantiation is forced by taking its address
    on the host (what NVRTC's name expression does), without naming its parameter types."""
    if not candidate.template_args:
        return candidate.source
    return (candidate.source + "\n// ptxfactory: instantiate the candidate's kernel template\n"
            f"[[maybe_unused]] static void* const __ptxfactory_instance = (void*)&{candidate.name_expression};\n")


def _nvcc(candidate: Candidate, arch: str, mode: str, lineinfo: bool = True) -> tuple[int | None, str, str | bytes | None]:
    """Run nvcc (``mode``: ``-cubin`` or ``-ptx``) on the candidate in a temporary folder, as an argument list,
    within :data:`NVCC_TIMEOUT_S`. Returns (exit code or None on timeout, log with the temporary paths
    replaced by ``KERNEL.cu``, the output: cubin bytes or PTX text, None when it failed)."""
    nvcc = nvcc_path()
    assert nvcc is not None
    name = f"{candidate.kernel_name}.cu"
    with tempfile.TemporaryDirectory(prefix="ptxfactory-nvcc-") as tmp:
        src = Path(tmp) / name
        src.write_text(_nvcc_source(candidate))
        out = src.with_suffix(".cubin" if mode == "-cubin" else ".ptx")
        keep = Path(tmp) / "keep"
        keep.mkdir()
        args = [nvcc, mode, f"-arch={arch}", "-std=c++17", "--expt-relaxed-constexpr", "-Xptxas", "-v",
                *(["-lineinfo", "-keep", f"-keep-dir={keep}"] if lineinfo else []), *candidate.options, "-o", str(out), str(src)]
        try:
            proc = subprocess.run(args, capture_output=True, text=True, timeout=NVCC_TIMEOUT_S, cwd=tmp)
        except subprocess.TimeoutExpired:
            return None, f"nvcc did not finish within {NVCC_TIMEOUT_S:.0f} s", None
        except OSError as exc:
            return -1, f"nvcc could not be run: {exc}", None
        log = (proc.stderr + proc.stdout).replace(str(src), name)
        if proc.returncode != 0 or not out.exists():
            kept = sorted(keep.glob("*.ptx"))
            if lineinfo and kept and _PTXAS_ERROR.search(log):
                log = map_ptxas_errors(re.sub(r"^ptxas \S+\.ptx,", "ptxas application ptx input,", log, flags=re.M),
                                       kept[0].read_text(), name)
            return proc.returncode, log.strip() or f"nvcc failed (exit code {proc.returncode}) without a log", None
        data = out.read_bytes() if mode == "-cubin" else out.read_text()
    return 0, log, data


def _compile_nvcc(candidate: Candidate, arch: str) -> Compiled | CompileFailed:
    """nvcc's cubin for the candidate, its lowered kernel name and the ptxas report; or why not."""
    if nvcc_path() is None:
        return CompileFailed(candidate_key=candidate.key, log="no nvcc found through CUDA_PATH, CUDA_HOME, PATH or /usr/local/cuda")
    _code, log, cubin = _nvcc(candidate, arch, "-cubin")
    if cubin is None:
        return CompileFailed(candidate_key=candidate.key, log=log, compiler="nvcc")
    lowered = _lowered_name(candidate, entry_names(cubin))
    if lowered is None:
        return CompileFailed(candidate_key=candidate.key, log=f"nvcc compiled no kernel {candidate.name_expression} "
                             f"(kernels in the cubin: {', '.join(entry_names(cubin)) or 'none'})", compiler="nvcc")
    return Compiled(candidate=candidate, cubin=cubin, lowered_name=lowered, resources=parse_ptxas_report(log, lowered),
                    log=log, compiler="nvcc")


# Itanium manglings of the builtin types (and the typedefs of <cstdint> on Linux) a template argument may name
_MANGLED = {"float": "f", "double": "d", "int": "i", "unsigned": "j", "unsigned int": "j", "char": "c", "signed char": "a",
            "unsigned char": "h", "short": "s", "unsigned short": "t", "long": "l", "unsigned long": "m", "long long": "x",
            "unsigned long long": "y", "bool": "b", "int8_t": "a", "uint8_t": "h", "int16_t": "s", "uint16_t": "t",
            "int32_t": "i", "uint32_t": "j", "int64_t": "l", "uint64_t": "m", "half": "6__half", "nv_bfloat16": "13__nv_bfloat16"}


def _mangled_arg(arg: int | str) -> str:
    text = str(arg).strip()
    if text in ("true", "false"):
        return f"Lb{int(text == 'true')}E"
    if re.fullmatch(r"-?\d+", text):
        return f"Li{text.replace('-', 'n')}E"
    if text in _MANGLED:
        return _MANGLED[text]
    return f"{len(text)}{text}"


def _lowered_name(candidate: Candidate, entries: list[str]) -> str | None:
    """Which of a cubin's entries is the candidate's kernel (``extern "C"``: its name; else the mangled name of
    the function, or of the template instantiation, in the global namespace). None when none is."""
    name = candidate.kernel_name
    if name in entries:
        return name
    prefix = f"_Z{len(name)}{name}"
    if candidate.template_args:
        exact = prefix + "I" + "".join(_mangled_arg(a) for a in candidate.template_args) + "E"
        found = [e for e in entries if e.startswith(exact)] or [e for e in entries if e.startswith(prefix + "I")]
    else:
        found = [e for e in entries if e.startswith(prefix) and not e.startswith(prefix + "I")]
    if len(found) == 1 or (candidate.template_args and found and found[0].startswith(exact)):
        return found[0]
    return None


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
    """A failed compilation's log without NULs and without ptxas's ``info`` lines (its errors stay, verbatim)."""
    log = log.replace("\0", "")
    lines = [ln for ln in log.splitlines() if ln.strip() and not ln.startswith("ptxas info")]
    return "\n".join(lines) or log.strip() or "NVRTC failed without a log"


def source_log(log: str, kernel_name: str, file_name: str) -> str:
    """``log`` (NVRTC's, whose program is named ``KERNEL.cu``) with that name replaced by the user's ``file_name``: for
    the kernel as written, whose source is the user's whole file, so its line numbers are the file's."""
    return log.replace(f"{kernel_name}.cu(", f"{file_name}(").replace(f'"{kernel_name}.cu"', f'"{file_name}"')
