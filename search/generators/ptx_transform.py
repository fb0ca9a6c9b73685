"""``ptx_transform``: semantics-preserving passes on a PTX entry (a kernel written in PTX).

Each candidate is the parent's module with one pass applied to the kernel's ``.entry`` (the search composes
them: a pass proposes again from each new best):

- ``ld_cop``: a cache operator on every global load that has none (``ld.global.ca``/``.cg``/``.cs``/``.lu``;
  after ``.nc`` only ``.ca``/``.cg``/``.cs``, what PTX allows there);
- ``st_cop``: a cache operator on every global store that has none (``.cg``, ``.cs``, ``.wt``);
- ``nc``: ``ld.global.nc`` (the read-only, non-coherent path) on the loads whose address derives only from
  buffers the spec says are ``in`` (never written by the kernel; the verifier checks inputs stay unchanged);
- ``vectorize``: 2 or 4 scalar loads (stores) of consecutive elements from one base register in one basic
  block merged into one ``.v2``/``.v4`` access, where the base register's alignment (from the spec's ``align``
  and ``constraints``, :func:`ptxfactory.harness.ptx_ir.alignments`) proves the wider access aligned, and no
  other memory access, register use or branch in between makes the move unsafe.

Loads and stores with a memory-order or scope qualifier (``.volatile``, ``.relaxed``, ``.acquire``...) are
never touched. ``params``: ``pass`` and the pass's knob (``cop``, ``vec``); ``hint`` (the shared knob) for the
cache operators and ``.nc``.
"""
from __future__ import annotations

import re

from ptxfactory.harness.ptx import PtxEntry, entry_of
from ptxfactory.harness.ptx_ir import Access, Stmt, accesses, alignments, alignments_at, param_origins, statements
from ptxfactory.harness.source import KernelDef, replace_kernel
from ptxfactory.protocol import Candidate, KernelSpec

from ..base import GenContext

LOAD_COPS = ("ca", "cg", "cs", "lu")
NC_COPS = ("ca", "cg", "cs")
STORE_COPS = ("cg", "cs", "wt")
_ORDERED = {"volatile", "relaxed", "acquire", "release", "weak", "mmio", "ca", "cg", "cs", "lu", "cv", "wb", "wt", "nc",
            "L1::evict_last", "L1::evict_first", "L1::no_allocate", "L2::evict_last", "L2::evict_first"}
_BARRIERS = ("bar", "barrier", "membar", "fence", "call", "ret", "exit", "bra", "atom", "red")

Edit = tuple[int, int, str]  # start, end (offsets into the entry text), replacement


def scalar_alignment(spec: KernelSpec, name: str) -> int:
    """A power of two known to divide the scalar argument ``name`` at every size: from its literal value, or, when
    its value is a size symbol, from a constraint ``SYMBOL % K == 0`` (the largest power of two dividing K)."""
    arg = next((a for a in spec.args if a.name == name and a.role == "scalar"), None)
    if arg is None:
        return 1
    if isinstance(arg.value, int):
        return (arg.value & -arg.value) if arg.value else 4096
    if isinstance(arg.value, str) and re.fullmatch(r"\s*[A-Za-z_]\w*\s*", arg.value):
        best = 1
        for c in spec.constraints:
            m = re.fullmatch(rf"\s*{re.escape(arg.value.strip())}\s*%\s*(\d+)\s*==\s*0\s*", c)
            if m and int(m.group(1)) > 0:
                k = int(m.group(1))
                best = max(best, k & -k)
        return best
    return 1


def param_alignments(spec: KernelSpec, entry: PtxEntry) -> dict[str, int]:
    """Per ``.param``: a buffer's guaranteed address alignment (the spec's ``align``, else its element size),
    a scalar's from :func:`scalar_alignment`."""
    out = {}
    for arg in spec.args:
        out[arg.name] = (arg.align or arg.dtype.itemsize) if arg.is_buffer else scalar_alignment(spec, arg.name)
    return {p.name: out.get(p.name, 1) for p in entry.params}


class _Body:
    """An entry's text, its statements (offsets into the text) and their analyses."""

    def __init__(self, entry: PtxEntry, spec: KernelSpec):
        self.entry, self.text = entry, entry.text
        self.stmts = statements(self.text, self.text.index("{") + 1, len(self.text) - 1)
        self.origins = param_origins(self.stmts)
        self.accesses = accesses(self.stmts, self.origins)
        self.buffers = {a.name: a for a in spec.args if a.is_buffer}
        self.spec = spec

    def opcode_span(self, s: Stmt) -> tuple[int, int]:
        i = self.text.index(s.opcode, s.start)
        return i, i + len(s.opcode)

    def apply(self, edits: list[Edit]) -> str:
        text = self.text
        for start, end, new in sorted(edits, reverse=True):
            text = text[:start] + new + text[end:]
        return text


def _plain(a: Access, allow: tuple[str, ...] = ()) -> bool:
    """An access without qualifiers that a pass must not combine with (``allow``: the ones it may)."""
    return not any(p in _ORDERED and p not in allow for p in a.stmt.parts[1:])


def _with(parts: list[str], after: str, new: str) -> str:
    i = parts.index(after) + 1
    return ".".join(parts[:i] + [new] + parts[i:])


def cache_operator_edits(body: _Body, kind: str, cop: str) -> list[Edit]:
    """``.cop`` after ``.global`` on each plain global load (``kind = "load"``) or store, none on a generic one."""
    edits = []
    for a in body.accesses:
        parts = a.stmt.parts
        if a.kind != kind or "global" not in parts:
            continue
        nc = "nc" in parts
        if not _plain(a, allow=("nc",)) or (nc and cop not in NC_COPS):
            continue
        start, end = body.opcode_span(a.stmt)
        edits.append((start, end, _with(parts, "global", cop)))
    return edits


def nc_edits(body: _Body) -> list[Edit]:
    """``.nc`` on each plain global load whose address derives from ``in`` buffers only."""
    edits = []
    for a in body.accesses:
        parts = a.stmt.parts
        if a.kind != "load" or "global" not in parts or not _plain(a, allow=("ca", "cg", "cs")):
            continue
        bufs = {p for p in a.params if p in body.buffers}
        if not bufs or any(body.buffers[p].role != "in" for p in bufs):
            continue
        cop = next((p for p in parts if p in ("ca", "cg", "cs")), None)
        start, end = body.opcode_span(a.stmt)
        edits.append((start, end, _with(parts, cop or "global", "nc")))
    return edits


def _type_bytes(t: str) -> int | None:
    m = re.fullmatch(r"[usbf](8|16|32|64)", t)
    return int(m.group(1)) // 8 if m else None


def vectorize_edits(body: _Body, width: int) -> list[Edit]:
    """Groups of ``width`` (2 or 4) scalar global loads or stores of consecutive elements from one base register in
    one basic block merged into one vector access (see the module's docstring for when it is safe)."""
    pa = param_alignments(body.spec, body.entry)
    whole, before = alignments(body.stmts, pa), alignments_at(body.stmts, pa)
    index = {id(s): i for i, s in enumerate(body.stmts)}
    by_stmt = {id(a.stmt): a for a in body.accesses}
    edits: list[Edit] = []
    used: set[int] = set()
    for a in body.accesses:
        size = _type_bytes(a.type)
        first = index[id(a.stmt)]
        if (a.kind not in ("load", "store") or first in used or size is None or a.stmt.guard or not _plain(a, allow=("ca", "cg", "cs", "nc", "lu", "wb", "wt"))
                or any(p.startswith("v") and p[1:].isdigit() for p in a.stmt.parts) or not a.base.startswith("%")
                or a.base in a.stmt.dest
                or size * width > 16 or a.offset % (size * width) or before[first].get(a.base, whole.get(a.base, 1)) < size * width):
            continue
        group = [first]
        want = a.offset + size
        for j in range(first + 1, len(body.stmts)):
            s = body.stmts[j]
            if s.label is not None or (s.opcode and s.parts[0] in _BARRIERS) or a.base in s.dest:
                break
            b = by_stmt.get(id(s))
            if b is not None and b.kind == a.kind and b.base == a.base and b.offset == want and b.stmt.opcode == a.stmt.opcode \
                    and not b.stmt.guard and j not in used:
                group.append(j)
                want += size
                if len(group) == width:
                    break
                continue
            if a.kind == "store" and (b is not None or (s.opcode and s.parts[0] in ("ld", "st"))):
                break  # a store moves down past nothing that touches memory
            if b is not None and b.kind != "load":
                break
        if len(group) != width or not _safe(body, group, a.kind):
            continue
        stmts = [body.stmts[j] for j in group]
        values = [s.operands[0] if a.kind == "load" else s.operands[1] for s in stmts]
        if len(set(values)) != width or not all(re.fullmatch(r"%[\w$]+", v) for v in values):
            continue
        opcode = a.stmt.opcode[: -len(a.type) - 1] + f".v{width}." + a.type
        addr = a.stmt.operands[1 if a.kind == "load" else 0]
        vec = "{" + ", ".join(values) + "}"
        merged = f"{opcode} {vec}, {addr}" if a.kind == "load" else f"{opcode} {addr}, {vec}"
        keep = group[0] if a.kind == "load" else group[-1]
        for j in group:
            s = body.stmts[j]
            edits.append((s.start, s.end, merged if j == keep else f"// ptxfactory: merged into the .v{width} access"))
            used.add(j)
    return edits


def _safe(body: _Body, group: list[int], kind: str) -> bool:
    """Whether merging ``group`` (statement indices) keeps the meaning: loads move up to the first, so no statement
    in between may read or write a later load's destination; stores move down to the last, so no statement in
    between may write an earlier store's value."""
    lo, hi = group[0], group[-1]
    for k, j in enumerate(group):
        s = body.stmts[j]
        if kind == "load":
            reg = s.operands[0]
            between = range(lo + 1, j)
        else:
            reg = s.operands[1]
            between = range(j + 1, hi + 1)
        for m in between:
            t = body.stmts[m]
            if m in group and kind == "load":
                continue
            if reg in t.dest or (kind == "load" and reg in t.sources):
                return False
    return True


def _candidate(ctx: GenContext, new_entry: str, description: str, params: dict) -> Candidate:
    return Candidate(
        kernel_name=ctx.original.kernel_name, source=replace_kernel(ctx.source, ctx.kernel, new_entry), kernel_text=new_entry,
        launch=ctx.original.launch, options=list(ctx.original.options), generator="ptx_transform", description=description,
        params=params, parent=ctx.original.key,
    )


class PtxTransformGenerator:
    """The PTX passes (see the module's docstring); proposes nothing for a CUDA kernel."""

    name = "ptx_transform"

    def propose(self, ctx: GenContext) -> list[Candidate]:
        """One candidate per pass and setting that changes the entry, in a fixed order; [] for CUDA."""
        if getattr(ctx.kernel, "language", "cuda") != "ptx":
            return []
        try:
            body = _Body(entry_of(ctx.kernel), ctx.spec)
        except (ValueError, KeyError):
            return []
        plans: list[tuple[list[Edit], str, dict]] = []
        for width in (4, 2):
            plans.append((vectorize_edits(body, width), f"PTX: .v{width} vector loads/stores where aligned",
                          {"pass": "vectorize", "vec": width * 4}))
        plans.append((nc_edits(body), "PTX: ld.global.nc on read-only inputs", {"pass": "nc", "hint": "ldg"}))
        for cop in LOAD_COPS:
            plans.append((cache_operator_edits(body, "load", cop), f"PTX: ld.global.{cop} on loads", {"pass": "ld_cop", "cop": cop}))
        for cop in STORE_COPS:
            plans.append((cache_operator_edits(body, "store", cop), f"PTX: st.global.{cop} on stores", {"pass": "st_cop", "cop": cop}))
        out, keys = [], set()
        for edits, description, params in plans:
            if not edits:
                continue
            cand = _candidate(ctx, body.apply(edits), description, params)
            if cand.key not in keys:
                keys.add(cand.key)
                out.append(cand)
        return out


def transform_entry(kernel: KernelDef, spec: KernelSpec, pass_name: str, setting: str | int) -> str | None:
    """The entry's text after one pass (``ld_cop``/``st_cop`` with a cache operator, ``nc``, ``vectorize`` with 2 or
    4 elements); None when the pass changes nothing. For tests and tools."""
    body = _Body(entry_of(kernel), spec)
    edits = {"ld_cop": lambda: cache_operator_edits(body, "load", str(setting)),
             "st_cop": lambda: cache_operator_edits(body, "store", str(setting)),
             "nc": lambda: nc_edits(body), "vectorize": lambda: vectorize_edits(body, int(setting))}[pass_name]()
    return body.apply(edits) if edits else None
