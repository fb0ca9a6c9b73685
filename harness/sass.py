"""SASS of a compiled kernel: the disassembly, its innermost loops, and a summary of its instruction mix.

- :func:`disassemble`: ``nvdisasm -c`` (code sections only, labels and branch targets by name), else ``cuobjdump
  -sass``; each a subprocess with an argument list, in a temporary folder, with a time limit;
- :func:`mark_sass`: the listing with its innermost loops (a branch back to a label or address above it) marked by
  comment lines (:func:`ptxfactory.harness.ptx_ir.mark_hot_loops`);
- :func:`summarise`: what a planner (and ``ptxfactory profile``) reads instead of the whole listing: per innermost
  loop and for the whole kernel, the count of instructions by kind (global loads and stores with their widths,
  shared and local memory, shuffles, FMAs, special functions, branches, barriers, atomics, tensor-core ops),
  bounded in size.

No GPU is needed. The tools are looked for by :func:`ptxfactory.harness.cuda_paths.tool_path` (the toolkit, PATH,
the ``nvidia-cuda-nvdisasm`` wheel).
"""
from __future__ import annotations

import re
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ptxfactory.protocol import Candidate, CompileFailed

from . import cuda_paths

DISASSEMBLE_TIMEOUT_S = 60.0  # one nvdisasm or cuobjdump run, seconds
MAX_LOOPS = 4  # innermost loops summarised one by one (the rest are counted)
MAX_LOOP_LINES = 40  # instructions of the hot loops quoted in a summary's text
MAX_TEXT = 4000  # characters of a summary's text


class SassError(RuntimeError):
    """No SASS can be made: no disassembler, it failed or timed out, or the candidate does not compile."""


def compiled_for(candidate: Candidate, arch: str):
    """The candidate compiled as a job compiles it (its options allowed as they are): a
    :class:`~ptxfactory.harness.compile.Compiled` (cubin, lowered name, resources). Blocking (NVRTC): run it in the
    compile pool (:meth:`~ptxfactory.harness.compile_pool.CompilePool.run`).

    Raises:
        SassError: it does not compile (the message has the compiler's first lines), or it is PTX and no ptxas was
            found (the driver's JIT makes its machine code on the GPU machine; nothing to disassemble).
    """
    from .compile import compile_candidate
    from .ptx import DRIVER_JIT

    compiled = compile_candidate(candidate, arch, fast_math_allowed=True)
    if isinstance(compiled, CompileFailed):
        raise SassError(f"{candidate.description} does not compile: {compiled.log.strip()[:400]}")
    if compiled.compiler == DRIVER_JIT:  # a PTX image: the machine code is made on the GPU machine
        raise SassError(f"{candidate.description} has no SASS here: no ptxas was found, so the CUDA driver JIT-compiles "
                        "its PTX when the job loads it on the GPU, and no cubin exists to disassemble")
    return compiled


def disassemble(cubin: bytes, timeout_s: float = DISASSEMBLE_TIMEOUT_S) -> str:
    """SASS of a cubin: ``nvdisasm -c`` (code sections only, with labels), else ``cuobjdump -sass``; each run as an
    argument list in a temporary folder, killed after ``timeout_s`` seconds. The temporary path is not in the text.

    Raises:
        SassError: neither tool is installed, or the ones found fail or time out (each one's reason).
    """
    tools = [(t, args) for t, args in (("nvdisasm", ["-c"]), ("cuobjdump", ["-sass"])) if cuda_paths.tool_path(t)]
    if not tools:
        raise SassError("no nvdisasm or cuobjdump found (CUDA_PATH, CUDA_HOME, PATH, /usr/local/cuda/bin, the "
                        "nvidia-cuda-nvdisasm wheel): install one to see SASS")
    errors = []
    with tempfile.TemporaryDirectory(prefix="ptxfactory-sass-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        for name, args in tools:
            try:
                proc = subprocess.run([cuda_paths.tool_path(name), *args, str(path)], capture_output=True, text=True,
                                      timeout=timeout_s, cwd=tmp)
            except subprocess.TimeoutExpired:
                errors.append(f"{name} did not finish within {timeout_s:.0f} s")
                continue
            except OSError as exc:
                errors.append(f"{name} could not be run: {exc}")
                continue
            if proc.returncode == 0 and proc.stdout.strip():
                return proc.stdout.replace(str(path), "kernel.cubin")
            errors.append(f"{name} failed (exit code {proc.returncode}): {proc.stderr.strip()[:300]}")
    raise SassError("; ".join(errors))


_LABEL = re.compile(r"^\s*(\.L_x_\d+|\.L_\w+)\s*:")
_BRANCH = re.compile(r"\b(?:BRA|BRX|JMP)\b[^;]*?(?:`\((\.L_\w+)\)|\b(0x[0-9a-fA-F]+)\b)")
_ADDRESS = re.compile(r"/\*([0-9a-fA-F]{4,})\*/")
# an instruction line: nvdisasm's "/*0150*/  @!P0 LDG.E.U16 R4, ..." or cuobjdump's "/*0150*/  LDG.E.U16 R4, ... ;  /* 0x... */"
_INSTRUCTION = re.compile(r"/\*[0-9a-fA-F]{4,}\*/\s*(?:\{\s*)?(?:@!?U?P[T\d]\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)")
# function headers: nvdisasm's section directive, cuobjdump's "Function : NAME"
_FUNCTION = re.compile(r"^\s*(?:\.section\s+\.text\.([^,\s]+)\s*,|Function\s*:\s*(\S+))")


def label_at(line: str) -> str | None:
    """The label a SASS line defines (nvdisasm's ``.L_x_N:``), or its address (cuobjdump's ``/*0150*/``), or None."""
    m = _LABEL.match(line)
    if m:
        return m.group(1)
    a = _ADDRESS.search(line)  # cuobjdump: no labels, every instruction has its address
    return f"0x{int(a.group(1), 16):x}" if a and not line.lstrip().startswith("//") else None


def branch_to(line: str) -> str | None:
    """Where a SASS branch (``BRA``, ``BRX``, ``JMP``) goes: a label or an address; None for another line."""
    m = _BRANCH.search(line)
    if not m:
        return None
    return m.group(1) or f"0x{int(m.group(2), 16):x}"


def mark_sass(sass: str) -> str:
    """A SASS listing (nvdisasm's or cuobjdump's) with its innermost loops marked (``//`` comment lines)."""
    from .ptx_ir import mark_hot_loops

    return mark_hot_loops(sass, label_at, branch_to)


def function_lines(sass: str, name: str | None) -> tuple[list[str], bool]:
    """The lines of function ``name`` (a lowered kernel name) in a listing, and whether it was found; the whole
    listing (and False) when it has no such function or ``name`` is None."""
    lines = sass.split("\n")
    start = end = None
    for i, line in enumerate(lines):
        m = _FUNCTION.match(line)
        if m and name is not None:
            if start is not None:
                end = i
                break
            if (m.group(1) or m.group(2)) == name:
                start = i
    return (lines[start:end], True) if start is not None else (lines, False)


def opcode(line: str) -> str | None:
    """The opcode with its modifiers (``LDG.E.128.CONSTANT``) of a SASS instruction line, or None for another line."""
    m = _INSTRUCTION.search(line)
    return m.group(1) if m else None


# kinds of instructions a summary counts: name -> opcodes (the base before the first dot)
KINDS: dict[str, tuple[str, ...]] = {
    "global loads": ("LDG", "LD"),
    "global stores": ("STG", "ST"),
    "async copies to shared": ("LDGSTS", "UBLKCP", "UTMALDG"),
    "shared loads": ("LDS", "LDSM"),
    "shared stores": ("STS",),
    "local loads": ("LDL",),
    "local stores": ("STL",),
    "shuffles": ("SHFL",),
    "FFMA": ("FFMA", "FFMA2"),
    "FADD/FMUL": ("FADD", "FMUL", "FADD2", "FMUL2"),
    "half FMA": ("HFMA2", "HADD2", "HMUL2"),
    "DFMA": ("DFMA", "DADD", "DMUL"),
    "tensor-core MMA": ("HMMA", "IMMA", "DMMA", "HGMMA", "IGMMA", "QGMMA", "UTCHMMA", "UTCQMMA", "UTCIMMA", "UTCOMMA"),
    "special functions (MUFU)": ("MUFU",),
    "atomics/reductions": ("ATOM", "ATOMG", "ATOMS", "RED", "REDG", "REDUX"),
    "branches": ("BRA", "BRX", "JMP", "JMX", "CALL"),
    "barriers": ("BAR", "BARRIER", "SYNCS"),
}
_KIND_OF = {op: kind for kind, ops in KINDS.items() for op in ops}
_WIDTHS = {"U8": 8, "S8": 8, "U16": 16, "S16": 16, "64": 64, "128": 128, "256": 256}
_MEMORY = ("global loads", "global stores", "shared loads", "shared stores", "local loads", "local stores")


def width_bits(op: str) -> int:
    """The access width in bits of a load or store opcode (``LDG.E.128`` -> 128, ``LDG.E.U16`` -> 16; 32 otherwise)."""
    return next((_WIDTHS[m] for m in op.split(".")[1:] if m in _WIDTHS), 32)


@dataclass(frozen=True)
class Mix:
    """The instructions of one stretch of SASS: ``instructions`` in all, ``counts`` by kind (:data:`KINDS`), and the
    access widths (bits -> count) of each memory kind."""

    instructions: int
    counts: dict[str, int] = field(default_factory=dict)
    widths: dict[str, dict[int, int]] = field(default_factory=dict)

    @classmethod
    def of(cls, lines: list[str]) -> Mix:
        """The mix of the instruction lines among ``lines`` (other lines are not counted)."""
        counts: Counter[str] = Counter()
        widths: dict[str, Counter[int]] = {}
        total = 0
        for line in lines:
            op = opcode(line)
            if op is None:
                continue
            total += 1
            kind = _KIND_OF.get(op.split(".")[0])
            if kind is None:
                continue
            counts[kind] += 1
            if kind in _MEMORY:
                widths.setdefault(kind, Counter())[width_bits(op)] += 1
        return cls(total, dict(counts), {k: dict(v) for k, v in widths.items()})

    def describe(self) -> str:
        """``N instructions: 2 global loads (128-bit x2), 4 FFMA, ...`` in :data:`KINDS` order (kinds absent left out)."""
        parts = []
        for kind in KINDS:
            n = self.counts.get(kind)
            if not n:
                continue
            w = self.widths.get(kind)
            bits = f" ({', '.join(f'{b}-bit x{c}' for b, c in sorted(w.items(), reverse=True))})" if w else ""
            parts.append(f"{n} {kind}{bits}")
        return f"{self.instructions} instructions" + (": " + ", ".join(parts) if parts else "")


@dataclass(frozen=True)
class SassSummary:
    """A kernel's SASS in brief: the ``whole`` function's mix, each innermost loop's (label, mix), and the loops'
    instructions (``loop_text``, at most :data:`MAX_LOOP_LINES` lines); ``function`` is the lowered name found
    (None: the whole listing was read)."""

    whole: Mix
    loops: list[tuple[str, Mix]]
    loop_text: str
    function: str | None = None

    def lines(self) -> list[str]:
        """The summary as text lines, bounded: at most :data:`MAX_LOOPS` loops one by one."""
        out = [f"whole kernel: {self.whole.describe()}"]
        if not self.loops:
            out.append("no loop (straight-line code)")
        for label, mix in self.loops[:MAX_LOOPS]:
            out.append(f"innermost loop {label}: {mix.describe()}")
        if len(self.loops) > MAX_LOOPS:
            out.append(f"... and {len(self.loops) - MAX_LOOPS} more innermost loops")
        return out

    def text(self, with_loops: bool = True, max_chars: int = MAX_TEXT) -> str:
        """:meth:`lines`, then (``with_loops``) the hot loops' instructions in a fenced block; cut to ``max_chars``."""
        text = "\n".join(f"- {ln}" for ln in self.lines())
        if with_loops and self.loop_text:
            text += f"\nhot loop instructions:\n```\n{self.loop_text}\n```"
        return text if len(text) <= max_chars else text[: max_chars - 30].rstrip() + "\n... (cut to keep it short)"


def _clean(line: str) -> str:
    """An instruction line without its address and encoding comments, spaces collapsed."""
    return " ".join(re.sub(r"/\*.*?\*/", " ", line).split())


def summarise(sass: str, function: str | None = None) -> SassSummary:
    """The summary of ``function``'s SASS (its lowered name; the whole listing when absent from it)."""
    from .ptx_ir import innermost_loops

    lines, found = function_lines(sass, function)
    loops = innermost_loops(lines, label_at, branch_to)
    quoted: list[str] = []
    mixes = []
    for a, b, label in loops:
        mixes.append((label, Mix.of(lines[a: b + 1])))
        body = [_clean(ln) for ln in lines[a: b + 1] if opcode(ln) or _LABEL.match(ln)]
        quoted += body
    if len(quoted) > MAX_LOOP_LINES:
        quoted = quoted[:MAX_LOOP_LINES] + [f"... ({len(quoted) - MAX_LOOP_LINES} more lines)"]
    return SassSummary(whole=Mix.of(lines), loops=mixes, loop_text="\n".join(quoted), function=function if found else None)


def candidate_summary(candidate: Candidate, arch: str, timeout_s: float = DISASSEMBLE_TIMEOUT_S) -> str:
    """The bounded SASS summary of a candidate as text (:meth:`SassSummary.text`), or ``SASS unavailable: WHY``.
    Blocking (compiles, runs a disassembler): run it in the compile pool."""
    try:
        compiled = compiled_for(candidate, arch)
        sass = disassemble(compiled.cubin, timeout_s)
    except SassError as exc:
        return f"SASS unavailable: {exc}"
    return summarise(sass, compiled.lowered_name).text()
