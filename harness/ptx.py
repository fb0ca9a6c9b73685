"""PTX as a source language: ``.entry`` parsing, signature checks against a spec, and ptxas.

A ``.ptx`` file (its first directive is ``.version``) holds one or more ``.entry`` kernels. Each is
found with its parameters (``.param .u64 .ptr .global .align 16 x``: name, type, state space,
alignment) and its byte range, as a :class:`~ptxfactory.harness.source.KernelDef` whose ``language``
is ``"ptx"``, so that the code lens, the code actions and the job treat it like a ``__global__``
function. A candidate whose source is PTX compiles with ``ptxas`` for the spec's arch (an argument
list, a time limit: :data:`PTXAS_TIMEOUT_S`); its errors are put at their line of the file as
``NAME.ptx(LINE): error: ptxas: MESSAGE`` (what :func:`ptxfactory.daemon.analysis.compile_messages`
reads).

Where no ``ptxas`` is found (:func:`ptx_route`), the module is left to the CUDA driver's JIT: the "compiled"
image is the PTX text itself, which the worker loads like a cubin (``cuModuleLoadData`` takes both) and the
driver compiles for the GPU it has; the resources then come from the loaded function's attributes, and what
only ptxas gives (the assembly check, its resource report and error lines, its options) is missing, with a
warning at the entry's line saying so (:func:`driver_jit_candidate`).
"""
from __future__ import annotations

import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from . import cuda_paths
from .source import KernelDef, Param, SignatureMismatch

if TYPE_CHECKING:
    from ptxfactory.protocol import Candidate, CompileFailed, KernelSpec

    from .compile import Compiled

PTXAS_TIMEOUT_S = 60.0  # one ptxas run, seconds

# Options a PTX candidate may carry (passed to ptxas as list items, never to a shell).
_ALLOWED_PTXAS_OPTION = re.compile(
    r"^(-O[0-3]|--?maxrregcount=\d{2,3}|--def-load-cache=(ca|cg|cs|lu|cv)|--def-store-cache=(wb|cg|cs|wt)"
    r"|--allow-expensive-optimizations=(true|false))$")

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_ENTRY = re.compile(r"^[ \t]*((?:\.(?:visible|weak|extern)\s+)*)\.entry\s+([A-Za-z_$%][\w$]*)\s*\(", re.M)
_PARAM = re.compile(
    r"\.param\s+((?:\.align\s+\d+\s+|\.\w+\s+)*?)\.(u8|u16|u32|u64|s8|s16|s32|s64|b8|b16|b32|b64|f16|f16x2|bf16|f32|f64)"
    r"((?:\s+\.\w+)*?)(?:\s+\.align\s+(\d+))?\s+([A-Za-z_$%][\w$]*)\s*(?:\[\s*(\d+)\s*\])?\s*$", re.S)

# spec dtype -> PTX parameter types that pass such a scalar
_SCALAR_TYPES = {
    "f32": ("f32", "b32"), "f64": ("f64", "b64"), "f16": ("f16", "b16"), "bf16": ("bf16", "b16"),
    "i32": ("s32", "u32", "b32"), "u32": ("u32", "s32", "b32"), "i64": ("s64", "u64", "b64"),
    "u64": ("u64", "s64", "b64"),
    "i8": ("s8", "u8", "b8"), "u8": ("u8", "s8", "b8"),
}


class PtxSyntaxError(ValueError):
    """PTX that the entry parser cannot read; ``line`` is 1-based."""

    def __init__(self, message: str, line: int):
        super().__init__(f"line {line}: {message}")
        self.message = message
        self.line = line


@dataclass(frozen=True)
class PtxParam:
    """One ``.param`` of an entry: ``type`` without its dot (``u64``), ``ptr`` for a ``.ptr`` attribute, ``space``
    its state space (``global``, ``shared``... or None), ``align`` in bytes (``.align N``; None when not given),
    ``array`` the element count of a ``.b8 p[16]`` aggregate (None for a plain value), ``line`` 1-based."""

    name: str
    type: str
    ptr: bool = False
    space: str | None = None
    align: int | None = None
    array: int | None = None
    line: int = 0

    @property
    def bits(self) -> int:
        """Width of one element in bits (``u64`` -> 64)."""
        return int(re.sub(r"\D", "", self.type.split("x")[0]))

    @property
    def may_be_pointer(self) -> bool:
        """A ``.ptr`` parameter, or a 64-bit integer one (how compilers pass a pointer)."""
        return self.array is None and (self.ptr or (self.bits == 64 and self.type[0] in "usb"))


@dataclass(frozen=True)
class PtxEntry:
    """An ``.entry`` function: name, parameters, character offsets ``start`` (its line's start, linkage
    included) to ``end`` (past the closing brace), 0-based ``start_line``/``name_line``/``end_line``, its ``text``
    and ``body`` (between the braces)."""

    name: str
    params: tuple[PtxParam, ...]
    start: int
    end: int
    start_line: int
    name_line: int
    end_line: int
    text: str
    body: str


def blank_comments(text: str) -> str:
    """``text`` with each comment replaced by spaces (newlines kept), so offsets and lines stay the same."""
    return _COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def is_ptx(text: str) -> bool:
    """Whether ``text`` is a PTX module: its first directive, after comments and blank space, is ``.version``."""
    return blank_comments(text[:20000]).lstrip().startswith(".version")


def _match_brace(code: str, open_at: int) -> int:
    """Offset of the ``}`` closing the ``{`` at ``open_at`` in comment-blanked ``code``; -1 when unbalanced."""
    depth = 0
    for i in range(open_at, len(code)):
        if code[i] == "{":
            depth += 1
        elif code[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return -1


def parse_param(text: str, line: int = 0) -> PtxParam:
    """One ``.param`` declaration (``.param .u64 .ptr .global .align 16 x``).

    Raises:
        PtxSyntaxError: it is not one.
    """
    flat = " ".join(text.split())
    m = _PARAM.fullmatch(flat)
    if not m:
        raise PtxSyntaxError(f"cannot read the parameter {flat!r}", line)
    attrs = (m.group(1) + " " + m.group(3)).split()
    space = next((a[1:] for a in attrs if a in (".global", ".shared", ".const", ".local")), None)
    early = re.search(r"\.align\s+(\d+)", m.group(1))  # .param .align 8 .b8 p[16]
    align = m.group(4) or (early.group(1) if early else None)
    return PtxParam(name=m.group(5), type=m.group(2), ptr=".ptr" in attrs, space=space,
                    align=int(align) if align else None, array=int(m.group(6)) if m.group(6) else None, line=line)


def parse_entries(ptx: str) -> list[PtxEntry]:
    """Every ``.entry`` of a PTX module with a body, in file order (a prototype without one is left out).

    Raises:
        PtxSyntaxError: a parameter list or a body that is not closed, or a parameter that cannot be read.
    """
    code = blank_comments(ptx)
    out = []
    for m in _ENTRY.finditer(code):
        close = code.find(")", m.end())
        if close < 0:
            raise PtxSyntaxError(f".entry {m.group(2)}: the parameter list is not closed", code.count("\n", 0, m.start()) + 1)
        params = []
        pos = m.end()
        for piece in code[m.end():close].split(","):
            if piece.strip():
                first = pos + len(piece) - len(piece.lstrip())
                params.append(parse_param(piece, code.count("\n", 0, first) + 1))
            pos += len(piece) + 1
        after = re.compile(r"[^{;]*").match(code, close + 1)
        brace = after.end()
        if brace >= len(code) or code[brace] == ";":
            continue  # a prototype
        end = _match_brace(code, brace)
        if end < 0:
            raise PtxSyntaxError(f".entry {m.group(2)}: the body is not closed", code.count("\n", 0, brace) + 1)
        start = m.start()
        out.append(PtxEntry(
            name=m.group(2), params=tuple(params), start=start, end=end + 1,
            start_line=code.count("\n", 0, start), name_line=code.count("\n", 0, m.start(2)), end_line=code.count("\n", 0, end),
            text=ptx[start:end + 1], body=ptx[brace + 1:end],
        ))
    return out


def kernel_defs(ptx: str) -> list[KernelDef]:
    """The module's entries as kernels (``language = "ptx"``; a parameter ``type`` is its PTX type, ``.u64``;
    ``is_pointer`` for one that may be a pointer, see :attr:`PtxParam.may_be_pointer`). Unreadable PTX has none."""
    try:
        entries = parse_entries(ptx)
    except PtxSyntaxError:
        return []
    out = []
    for e in entries:
        start_byte = len(ptx[:e.start].encode())
        out.append(KernelDef(
            name=e.name, params=tuple(Param(name=p.name, type="." + p.type, is_pointer=p.may_be_pointer, is_const=False) for p in e.params),
            start_byte=start_byte, end_byte=start_byte + len(e.text.encode()), start_line=e.start_line, end_line=e.end_line,
            name_line=e.name_line, text=e.text, language="ptx",
        ))
    return out


def entry_of(kernel: KernelDef) -> PtxEntry:
    """The parsed entry of a PTX kernel. Raises PtxSyntaxError (or KeyError when its text holds no entry)."""
    entries = parse_entries(kernel.text)
    if not entries:
        raise KeyError(f"no .entry in the text of {kernel.name!r}")
    return entries[0]


def check_entry_signature(spec: "KernelSpec", kernel: KernelDef) -> None:
    """Check the spec's ``args`` against a PTX entry's parameters: count, order, names, a buffer passed as a 64-bit
    integer (or ``.ptr``), a scalar's PTX type against its dtype, and each ``.ptr .align N`` against the spec's
    ``align`` (the entry may rely on N bytes: the spec must guarantee at least that).

    Raises:
        SignatureMismatch: naming the first argument that differs and the spec key to fix.
    """
    if spec.tune.template:
        raise SignatureMismatch(f"tune.template sets {', '.join(spec.tune.template)} but a PTX entry has no template parameters",
                                key="tune.template")
    params = entry_of(kernel).params
    if len(params) != len(spec.args):
        raise SignatureMismatch(
            f".entry {kernel.name!r} has {len(params)} parameters ({', '.join(p.name for p in params)}) "
            f"but the spec lists {len(spec.args)} args ({', '.join(a.name for a in spec.args)})", key="args")
    for i, (arg, p) in enumerate(zip(spec.args, params)):
        where = f"args[{i}] ({arg.name!r})"
        if arg.name != p.name:
            raise SignatureMismatch(f"{where}: the entry's parameter {i} is named {p.name!r}", key=f"args[{i}].name")
        if p.array is not None:
            raise SignatureMismatch(f"{where}: .param {p.name} is an aggregate ({p.type}[{p.array}]): not supported", key=f"args[{i}]")
        if arg.is_buffer:
            if not p.may_be_pointer:
                raise SignatureMismatch(f"{where}: role {arg.role!r} needs a 64-bit address (.u64), the entry takes .{p.type} {p.name}",
                                        key=f"args[{i}].role")
            if p.space not in (None, "global"):
                raise SignatureMismatch(f"{where}: .param {p.name} points to .{p.space} memory, a buffer is .global", key=f"args[{i}].role")
            if p.align is not None and (arg.align or arg.dtype.itemsize) < p.align:
                raise SignatureMismatch(f"{where}: the entry declares .ptr .align {p.align} for {p.name}: set align = {p.align} "
                                        f"(the caller must guarantee it)", key=f"args[{i}].align")
        else:
            if p.ptr:
                raise SignatureMismatch(f"{where}: role 'scalar' but the entry takes a .ptr {p.name}", key=f"args[{i}].role")
            allowed = _SCALAR_TYPES.get(arg.dtype.value, ())
            if p.type not in allowed:
                raise SignatureMismatch(f"{where}: dtype {arg.dtype.value} expects .{' or .'.join(allowed)}, the entry declares .{p.type}",
                                        key=f"args[{i}].dtype")


# --- ptxas, or the driver's JIT ------------------------------------------------------------------------------

DRIVER_JIT = "driver"  # ``Compiled.compiler`` of a PTX module left to the CUDA driver's JIT
NO_PTXAS = "no ptxas found through CUDA_PATH, CUDA_HOME, PATH, /usr/local/cuda or the pip wheels"


@dataclass(frozen=True)
class PtxRoute:
    """How a PTX module becomes machine code on this machine: ``compiler`` is ``"ptxas"`` (assembled here, ahead of the
    GPU: a cubin, ptxas's resource report, errors at their lines, the candidate's ptxas options) or ``"driver"``
    (:data:`DRIVER_JIT`: the PTX itself goes to the worker, whose CUDA driver JIT-compiles it at module load).
    ``ptxas`` is the tool's path (None on the driver's route); ``why`` says why the driver's route was taken and what
    it gives up (None on ptxas's)."""

    compiler: str
    ptxas: str | None = None
    why: str | None = None


def ptx_route() -> PtxRoute:
    """ptxas's route when :func:`~ptxfactory.harness.cuda_paths.tool_path` finds ``ptxas``, else the driver's JIT."""
    ptxas = cuda_paths.tool_path("ptxas")
    if ptxas is not None:
        return PtxRoute("ptxas", ptxas)
    return PtxRoute(DRIVER_JIT, None, f"{NO_PTXAS}: the CUDA driver JIT-compiles this PTX when the job loads it on the GPU "
                                      "(no assembly check, ptxas resource report or ptxas options here)")


@dataclass(frozen=True)
class PtxasRun:
    """One ptxas run: ``returncode`` (None: it timed out or could not start), its ``log`` (stderr and stdout,
    the temporary path replaced by the file's name), the ``cubin`` (None when it failed)."""

    returncode: int | None
    log: str
    cubin: bytes | None


def check_ptxas_options(options: list[str]) -> str | None:
    """Why ``options`` are not acceptable for a PTX candidate, or None (``-O0``..``-O3``, ``-maxrregcount=N``,
    ``--def-load-cache=``/``--def-store-cache=`` with a cache operator, ``--allow-expensive-optimizations=``)."""
    for opt in options:
        if not _ALLOWED_PTXAS_OPTION.match(opt):
            return f"ptxas option {opt!r} is not allowed"
    return None


def run_ptxas(ptx: str, arch: str, options: list[str] | tuple[str, ...] = (), name: str = "kernel.ptx",
              timeout_s: float = PTXAS_TIMEOUT_S) -> PtxasRun:
    """Assemble ``ptx`` for ``arch`` (``sm_90a``) with ``ptxas -v`` and ``options``, in a temporary folder, as an
    argument list, within ``timeout_s`` seconds (the process is killed past it). ``name`` is the file name that
    the log shows. Never raises for bad PTX: a failure is a non-zero or None ``returncode`` with the log."""
    ptxas = ptx_route().ptxas
    if ptxas is None:
        return PtxasRun(-1, NO_PTXAS, None)
    name = Path(name).name or "kernel.ptx"
    with tempfile.TemporaryDirectory(prefix="ptxfactory-ptxas-") as tmp:
        src = Path(tmp) / name
        src.write_text(ptx)
        out = Path(tmp) / "out.cubin"
        args = [ptxas, "-v", f"-arch={arch}", *options, "-o", str(out), str(src)]
        try:
            proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, cwd=tmp)
        except subprocess.TimeoutExpired:
            return PtxasRun(None, f"ptxas did not finish within {timeout_s:.0f} s", None)
        except OSError as exc:
            return PtxasRun(-1, f"ptxas could not be run: {exc}", None)
        log = (proc.stderr + proc.stdout).replace(str(src), name)
        cubin = out.read_bytes() if proc.returncode == 0 and out.exists() else None
    return PtxasRun(proc.returncode, log, cubin)


_PTXAS_MESSAGE = re.compile(r"^ptxas\s+(?:\S+), line (\d+); (error|warning|fatal)\s*: (.*)$", re.M)


def map_ptxas_log(log: str, name: str) -> str:
    """``log`` with a ``NAME(LINE): SEVERITY: ptxas: MESSAGE`` line before it for each ptxas message that names a
    line of the PTX file (``fatal`` becomes ``error``); the ptxas lines themselves are kept verbatim."""
    mapped = [f"{name}({m.group(1)}): {'warning' if m.group(2) == 'warning' else 'error'}: ptxas: {m.group(3).strip()}"
              for m in _PTXAS_MESSAGE.finditer(log)]
    return "\n".join([*mapped, log]) if mapped else log


def source_name(kernel_name: str) -> str:
    """The name a PTX candidate's file has in its logs: ``KERNEL.ptx``."""
    return f"{kernel_name}.ptx"


def compile_ptx_candidate(candidate: "Candidate", arch: str) -> "Compiled | CompileFailed":
    """A PTX candidate assembled by ptxas for ``arch``: :class:`~ptxfactory.harness.compile.Compiled` with the cubin,
    the entry's name and the resources from ptxas's report (``compiler = "ptxas"``), or
    :class:`~ptxfactory.protocol.CompileFailed` with the log (errors at their lines, see :func:`map_ptxas_log`) for
    PTX ptxas refuses, a refused option, or an entry missing from the cubin. Without ptxas (:func:`ptx_route`):
    :func:`driver_jit_candidate`. Never raises for bad PTX."""
    from ptxfactory.protocol import CompileFailed

    from .compile import Compiled, parse_ptxas_report
    from .elf import entry_names

    bad = check_ptxas_options(list(candidate.options))
    if bad:
        return CompileFailed(candidate_key=candidate.key, log=bad, compiler="ptxas")
    route = ptx_route()
    if route.compiler == DRIVER_JIT:
        return driver_jit_candidate(candidate, route.why or NO_PTXAS)
    name = source_name(candidate.kernel_name)
    run = run_ptxas(candidate.source, arch, candidate.options, name)
    if run.cubin is None:
        log = map_ptxas_log(run.log.strip(), name) or f"ptxas failed (exit code {run.returncode}) without a log"
        return CompileFailed(candidate_key=candidate.key, log=log, compiler="ptxas")
    entries = entry_names(run.cubin)
    if candidate.kernel_name not in entries:
        return CompileFailed(candidate_key=candidate.key, compiler="ptxas",
                             log=f"ptxas assembled no entry {candidate.kernel_name} (entries: {', '.join(entries) or 'none'})")
    return Compiled(candidate=candidate, cubin=run.cubin, lowered_name=candidate.kernel_name,
                    resources=parse_ptxas_report(run.log, candidate.kernel_name), log=run.log, compiler="ptxas")


def driver_jit_candidate(candidate: "Candidate", why: str) -> "Compiled | CompileFailed":
    """A PTX candidate left to the CUDA driver's JIT (no ptxas here; ``why`` says so).

    Returns :class:`~ptxfactory.harness.compile.Compiled` whose ``cubin`` is the image the worker loads: the module's
    text, NUL-terminated (what ``cuModuleLoadData`` takes for PTX), ``resources`` None (the worker reads the loaded
    function's registers, shared and local bytes), ``compiler = "driver"`` and a log whose first line is
    ``NAME.ptx(LINE): warning: ptxas not run: WHY`` at the entry's line. :class:`~ptxfactory.protocol.CompileFailed`
    for what the CPU can still refuse: an entry that cannot be parsed (an error at its line), no ``.entry`` of the
    kernel's name, or ptxas options (the driver's JIT is given none: they would not be what ran). PTX the driver
    refuses is refused when the worker loads it (``Rejected``, check ``load``)."""
    from ptxfactory.protocol import CompileFailed

    from .compile import Compiled

    name = source_name(candidate.kernel_name)
    if candidate.options:
        return CompileFailed(candidate_key=candidate.key, compiler=DRIVER_JIT,
                             log=f"ptxas options {' '.join(candidate.options)} need ptxas: {why}")
    try:
        entries = parse_entries(candidate.source)
    except PtxSyntaxError as exc:
        return CompileFailed(candidate_key=candidate.key, compiler=DRIVER_JIT, log=f"{name}({exc.line}): error: {exc.message}\n({why})")
    entry = next((e for e in entries if e.name == candidate.kernel_name), None)
    if entry is None:
        return CompileFailed(candidate_key=candidate.key, compiler=DRIVER_JIT,
                             log=f"no .entry {candidate.kernel_name} in the module (entries: {', '.join(e.name for e in entries) or 'none'})")
    log = f"{name}({entry.name_line + 1}): warning: ptxas not run: {why}"
    return Compiled(candidate=candidate, cubin=candidate.source.encode() + b"\0", lowered_name=candidate.kernel_name,
                    resources=None, log=log, compiler=DRIVER_JIT)
