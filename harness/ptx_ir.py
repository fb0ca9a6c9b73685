"""A PTX entry's body as statements, and what the PTX passes, the spec scaffold and the views need to know of it.

- :func:`statements`: labels and instructions (guard, opcode, operands) with their character offsets;
- :func:`param_origins`: which ``.param`` each register's value derives from (an address of ``x``, ...), to a
  fixed point over the whole body (flow-insensitive: a register defined twice has both origins);
- :func:`accesses`: each global load, store and atomic with the parameters its address derives from;
- :func:`alignments`: for each register, a power of two known to divide its value (the spec's ``align`` for
  a buffer parameter, ``constraints`` such as ``N % 4 == 0`` for a scalar), to a greatest fixed point;
- :func:`mark_hot_loops`: the innermost loops (a branch back to a label above it) of any listing, PTX or SASS,
  marked with comment lines.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .ptx import blank_comments

ALIGN_CAP = 4096  # the largest alignment the analysis tracks, bytes (a zero is divisible by everything: capped here)

_LABEL = re.compile(r"([A-Za-z_$][\w$]*)\s*:(?!:)")
_REG = re.compile(r"%[A-Za-z_$][\w$]*")
_ADDRESS = re.compile(r"^\[\s*(%?[A-Za-z_$][\w$]*)\s*(?:\+\s*(-?(?:0[xX][0-9a-fA-F]+|\d+)))?\s*\]$")


@dataclass(frozen=True)
class Stmt:
    """One statement of a body: a ``label`` (then ``opcode`` is ''), or an instruction or directive with its
    ``guard`` (``@%p1``, ``@!%p1`` or None), ``opcode`` (``ld.global.f32``) and ``operands`` (split at top-level
    commas, ``{%f1, %f2}`` kept whole). ``start``/``end``: character offsets of its text in the text parsed
    (``end`` at the ``;``, excluded)."""

    start: int
    end: int
    opcode: str = ""
    operands: tuple[str, ...] = ()
    guard: str | None = None
    label: str | None = None

    @property
    def parts(self) -> list[str]:
        """The opcode's dot-separated parts (``ld.global.f32`` -> ``["ld", "global", "f32"]``)."""
        return self.opcode.split(".")

    @property
    def dest(self) -> tuple[str, ...]:
        """Registers this instruction writes: its first operand's, except for stores, reductions, branches, barriers."""
        if not self.opcode or self.opcode.startswith(".") or not self.operands:
            return ()
        if self.parts[0] in ("st", "red", "bra", "bar", "barrier", "ret", "exit", "call", "membar", "fence", "prefetch", "trap"):
            return ()
        return tuple(_REG.findall(self.operands[0].split("|")[0])) + tuple(_REG.findall("|".join(self.operands[0].split("|")[1:])))

    @property
    def sources(self) -> tuple[str, ...]:
        """Registers this instruction reads (every operand's but the destination's; a store's all)."""
        ops = self.operands if not self.dest else self.operands[1:]
        return tuple(r for op in ops for r in _REG.findall(op))


def _split_operands(text: str) -> tuple[str, ...]:
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "{[(":
            depth += 1
        elif ch in "}])":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return tuple(out)


def statements(text: str, start: int = 0, end: int | None = None) -> list[Stmt]:
    """The statements of ``text[start:end]`` (a body), offsets into ``text``. Braces of nested scopes are skipped."""
    code = blank_comments(text)
    end = len(code) if end is None else end
    out: list[Stmt] = []
    pos = start
    while pos < end:
        while pos < end and (code[pos].isspace() or code[pos] in "{}"):
            pos += 1
        if pos >= end:
            break
        m = _LABEL.match(code, pos)
        if m and m.end() <= end:
            out.append(Stmt(start=pos, end=m.end(), label=m.group(1)))
            pos = m.end()
            continue
        semi = code.find(";", pos, end)
        if semi < 0:
            break
        body = code[pos:semi].strip()
        guard = None
        g = re.match(r"@!?%[\w$]+\s+", body)
        if g:
            guard, body = g.group(0).strip(), body[g.end():]
        opcode, _, rest = body.partition(" ")
        if "\t" in opcode:
            opcode, _, more = opcode.partition("\t")
            rest = more + " " + rest
        out.append(Stmt(start=pos, end=semi, opcode=opcode.strip(), operands=_split_operands(rest.strip()), guard=guard))
        pos = semi + 1
    return out


def address(op: str) -> tuple[str, int] | None:
    """``[%rd7+8]`` -> ``("%rd7", 8)``; ``[x]`` -> ``("x", 0)``; None for anything else."""
    m = _ADDRESS.match(op.strip())
    if not m:
        return None
    return m.group(1), int(m.group(2), 0) if m.group(2) else 0


def param_loads(stmts: list[Stmt]) -> dict[str, set[str]]:
    """Register -> the ``.param`` names loaded into it by ``ld.param`` (directly)."""
    out: dict[str, set[str]] = {}
    for s in stmts:
        if s.parts[:2] == ["ld", "param"] and len(s.operands) == 2:
            a = address(s.operands[1])
            if a is not None and s.dest:
                out.setdefault(s.dest[0], set()).add(a[0])
    return out


def param_origins(stmts: list[Stmt]) -> dict[str, frozenset[str]]:
    """Register -> the ``.param`` names its value may derive from (through moves, conversions and arithmetic; not
    through memory: a loaded value derives from nothing). Registers derived from no parameter are left out."""
    origin: dict[str, set[str]] = {r: set(p) for r, p in param_loads(stmts).items()}
    changed = True
    while changed:
        changed = False
        for s in stmts:
            if not s.dest or s.parts[0] in ("ld", "atom", "tex", "suld", "setp", "set"):
                continue  # ld.param seeded above; a loaded value or a predicate is no address
            got = set().union(*(origin.get(r, set()) for r in s.sources)) if s.sources else set()
            for d in s.dest:
                if not got <= origin.get(d, set()):
                    origin.setdefault(d, set()).update(got)
                    changed = True
    return {r: frozenset(p) for r, p in origin.items() if p}


_GLOBAL_SPACES = ("global", "")  # a load or store without a state space is generic: it may reach global memory
_OTHER_SPACES = ("param", "shared", "local", "const", "tex")


@dataclass(frozen=True)
class Access:
    """A memory access of global (or generic) memory: ``kind`` ``load``, ``store`` or ``atomic``, the statement,
    its address register (or symbol) and offset, the parameters the address derives from, the element type."""

    kind: str
    stmt: Stmt
    base: str
    offset: int
    params: frozenset[str]
    type: str


def _space(parts: list[str]) -> str:
    return next((p for p in parts[1:] if p in _OTHER_SPACES or p == "global"), "")


def accesses(stmts: list[Stmt], origins: Mapping[str, frozenset[str]] | None = None) -> list[Access]:
    """The body's loads, stores and atomics (``ld``/``st``/``atom``/``red``) of global or generic memory."""
    origins = param_origins(stmts) if origins is None else origins
    out = []
    for s in stmts:
        head = s.parts[0] if s.opcode else ""
        if head not in ("ld", "st", "atom", "red") or _space(s.parts) not in _GLOBAL_SPACES:
            continue
        index = 1 if head in ("ld", "atom") else 0
        if len(s.operands) <= index:
            continue
        a = address(s.operands[index])
        if a is None:
            continue
        kind = {"ld": "load", "st": "store"}.get(head, "atomic")
        out.append(Access(kind=kind, stmt=s, base=a[0], offset=a[1], params=origins.get(a[0], frozenset()), type=s.parts[-1]))
    return out


def _pow2_divisor(value: int) -> int:
    """The largest power of two dividing ``value`` (capped at :data:`ALIGN_CAP`; zero: the cap)."""
    if value == 0:
        return ALIGN_CAP
    return min(value & -value, ALIGN_CAP)


def _immediate(op: str) -> int | None:
    op = op.strip()
    if re.fullmatch(r"-?(0[xX][0-9a-fA-F]+|\d+)[uU]?", op):
        return int(op.rstrip("uU"), 0)
    return None


def _align_value(s: Stmt, of: Callable[[str], int], param_align: Mapping[str, int]) -> int:
    """The alignment of what ``s`` writes, given ``of`` (an operand's alignment); see :func:`alignments`."""
    head, ops = s.parts[0], s.operands
    if s.opcode.startswith("ld.param"):
        a = address(ops[1]) if len(ops) > 1 else None
        return param_align.get(a[0], 1) if a is not None and a[1] == 0 else 1
    if s.guard is not None or len(ops) < 2:
        return 1
    if head in ("mov", "cvt", "cvta") and len(ops) == 2:
        return of(ops[1])
    if head in ("add", "sub") and len(ops) == 3:
        return min(of(ops[1]), of(ops[2]))
    if head == "mul" and len(ops) == 3 and not s.parts[-1].startswith(("f", "bf")) and "hi" not in s.parts:
        return min(of(ops[1]) * of(ops[2]), ALIGN_CAP)
    if head == "shl" and len(ops) == 3 and _immediate(ops[2]) is not None:
        return min(of(ops[1]) << min(_immediate(ops[2]), 12), ALIGN_CAP)
    if head == "mad" and len(ops) == 4 and ("lo" in s.parts or "wide" in s.parts):
        return min(of(ops[1]) * of(ops[2]), of(ops[3]), ALIGN_CAP)
    return 1


def _pow2_floor(v: int) -> int:
    return 1 << (v.bit_length() - 1) if v > 0 else 1


def _operand(op: str, lookup: Callable[[str], int]) -> int:
    imm = _immediate(op)
    if imm is not None:
        return _pow2_divisor(imm)
    return lookup(op.strip()) if op.strip().startswith("%") else 1


def alignments(stmts: list[Stmt], param_align: Mapping[str, int]) -> dict[str, int]:
    """Register -> a power of two (bytes or units, as the value is) known to divide its value everywhere.

    ``param_align``: for each ``.param`` name, a power of two dividing its value (a buffer's address: the spec's
    ``align``; a scalar: from ``constraints``). Moves and conversions keep it, ``add``/``sub`` take the smaller,
    ``mul``/``shl`` by a constant or of two known registers multiply, ``mad`` both; everything else is 1.
    A register defined several times gets the smallest (the greatest fixed point, from :data:`ALIGN_CAP` down).
    """
    defs: dict[str, list[Stmt]] = {}
    for s in stmts:
        for d in s.dest:
            defs.setdefault(d, []).append(s)
    align = {r: ALIGN_CAP for r in defs}
    lookup = lambda r: align.get(r, 1)  # noqa: E731
    changed = True
    while changed:
        changed = False
        for r, ss in defs.items():
            new = _pow2_floor(min(min(_align_value(s, lambda op: _operand(op, lookup), param_align) for s in ss), ALIGN_CAP))
            if new < align[r]:
                align[r] = new
                changed = True
    return align


def alignments_at(stmts: list[Stmt], param_align: Mapping[str, int]) -> list[dict[str, int]]:
    """For each statement, what :func:`alignments` knows of the registers just before it, sharpened in straight-line
    code: within a basic block a register has the alignment of its last definition above; at a label (where
    branches join) every register falls back to its whole-body value from :func:`alignments`. Only the registers
    defined so far in the block are listed; look others up in :func:`alignments`."""
    whole = alignments(stmts, param_align)
    cur: dict[str, int] = {}
    out = []
    lookup = lambda r: cur.get(r, whole.get(r, 1))  # noqa: E731
    for s in stmts:
        if s.label is not None:
            cur = {}
        out.append(dict(cur))
        if s.dest:
            value = _pow2_floor(min(_align_value(s, lambda op: _operand(op, lookup), param_align), ALIGN_CAP))
            for d in s.dest:
                cur[d] = value
    return out


# --- innermost loops ---------------------------------------------------------------------------------------

HOT_BEGIN = "ptxfactory: hot loop begins (innermost loop: {label}, back edge at line {line})"
HOT_END = "ptxfactory: hot loop ends ({label})"


def innermost_loops(lines: list[str], label_at: Callable[[str], str | None],
                    branch_to: Callable[[str], str | None]) -> list[tuple[int, int, str]]:
    """The innermost loops of a listing: (line of the label, line of the branch back to it, label), 0-based, for
    each branch to a label above it whose range holds no other such loop. A branch right after its own label (a
    spin, such as the ``BRA`` to itself that ends every SASS function) is no loop."""
    labels: dict[str, int] = {}
    loops = []
    for i, line in enumerate(lines):
        lab = label_at(line)
        if lab is not None:
            labels.setdefault(lab, i)
        target = branch_to(line)
        if target is not None and target in labels and labels[target] < i - 1:  # not a spin (``L: bra L;``)
            loops.append((labels[target], i, target))
    return [(a, b, lab) for a, b, lab in loops
            if not any((a2, b2) != (a, b) and a <= a2 and b2 <= b for a2, b2, _ in loops)]


def mark_hot_loops(text: str, label_at: Callable[[str], str | None], branch_to: Callable[[str], str | None],
                   comment: str = "//") -> str:
    """``text`` with a ``{comment} ptxfactory: hot loop begins ...`` line before each innermost loop's label and a
    ``... ends`` line after its back edge (:func:`innermost_loops`); unchanged when there is no loop."""
    lines = text.split("\n")
    loops = innermost_loops(lines, label_at, branch_to)
    before: dict[int, list[str]] = {}
    after: dict[int, list[str]] = {}
    for a, b, lab in loops:
        indent = re.match(r"\s*", lines[a]).group(0)
        before.setdefault(a, []).append(f"{indent}{comment} " + HOT_BEGIN.format(label=lab, line=b + 1))
        after.setdefault(b, []).append(f"{indent}{comment} " + HOT_END.format(label=lab))
    out = []
    for i, line in enumerate(lines):
        out += before.get(i, [])
        out.append(line)
        out += after.get(i, [])
    return "\n".join(out)


_PTX_LABEL = re.compile(r"^\s*([A-Za-z_$][\w$]*)\s*:(?!:)")
_PTX_BRANCH = re.compile(r"\bbra(?:\.uni)?\s+([A-Za-z_$][\w$]*)\s*;")


def mark_ptx_hot_loops(ptx: str) -> str:
    """A PTX listing with its innermost loops marked (``//`` comment lines); comments in it are not read."""
    return mark_hot_loops(ptx, lambda ln: (m.group(1) if (m := _PTX_LABEL.match(ln.split("//")[0])) else None),
                          lambda ln: (m.group(1) if (m := _PTX_BRANCH.search(ln.split("//")[0])) else None))
