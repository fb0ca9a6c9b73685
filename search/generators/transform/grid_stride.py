"""``grid_stride``: a one-thread-per-element kernel becomes a grid-stride loop over a capped grid.

Pattern (the kernel body starts with it; casts and either operand order allowed)::

    T i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;            // or: if (i < n) { ... } (or one statement) as the last statement
    ...rest...

becomes ``for (T i = <same>; i < n; i += (T)gridDim.x * (T)blockDim.x) { ...rest... }`` and the
1-D grid ``G`` becomes ``min(G, S * k)``: the GPU's ``S`` SMs times ``k = R / block`` blocks, one
full-occupancy wave (``R`` resident threads per SM, from the GPU's architecture:
:func:`threads_per_sm`; a block that is not a literal counts as 256 threads). The GPU's facts come
with the unit (``unit.notes["facts"]``: :data:`FACTS_NOTE`, the generator's ``GenContext.facts``);
without them (no GPU: a compile-only job) the grid is kept uncapped, so the loop runs once per thread
and the candidate does not depend on any GPU's size. Every element is still computed by exactly one
thread with the same code, so results are exact.

Preconditions: a 1-D launch with ``policy = "free"``; ``rest`` has no ``return``, barrier, warp
collective, ``__shared__`` data or use of ``threadIdx``/``blockIdx``/``blockDim``/``gridDim``; ``i``
and the names in ``n`` are not written in ``rest``; a 32-bit index does not overflow at the spec's
sizes (the original grid's threads plus one stride, capped or not, stay below 2^31).
"""
from __future__ import annotations

from typing import NamedTuple

from ptxfactory.protocol import LaunchConfig
from ptxfactory.protocol.expr import ExprError, evaluate

from . import syntax as sx
from .base import Unit
from .syntax import Node

FACTS_NOTE = "facts"  # the unit note holding the GPU's facts (protocol GpuFacts), when the job has a GPU
# Maximum resident threads per SM by compute capability (CUDA C++ Programming Guide, "Technical
# Specifications per Compute Capability"); an architecture not listed gets the largest, 2048.
THREADS_PER_SM = {75: 1024, 80: 2048, 86: 1536, 87: 2048, 89: 1536, 90: 2048, 100: 2048, 103: 2048, 120: 1536, 121: 1536}
MAX_THREADS_PER_SM = 2048
UNKNOWN_BLOCK = 256  # threads assumed for a block that is not an integer literal
COLLECTIVES = sx.BARRIERS + ("__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync", "__ballot_sync",
                             "__any_sync", "__all_sync", "__activemask", "__reduce_add_sync", "__match_any_sync")


def threads_per_sm(arch: str) -> int:
    """Maximum resident threads per SM for an architecture name (``sm_90a`` -> 2048, ``sm_86`` -> 1536)."""
    digits = "".join(c for c in arch.removeprefix("sm_").removeprefix("compute_") if c.isdigit())
    return THREADS_PER_SM.get(int(digits), MAX_THREADS_PER_SM) if digits else MAX_THREADS_PER_SM


def wave_blocks(facts, block_threads: int | None) -> int | None:
    """Blocks of ``block_threads`` threads in one full-occupancy wave of the GPU (``facts``: protocol
    GpuFacts: its ``sm_count`` and ``arch``), at least one per SM; None without facts."""
    if facts is None:
        return None
    per_sm = max(1, threads_per_sm(facts.arch) // (block_threads or UNKNOWN_BLOCK))
    return facts.sm_count * per_sm


class GridStridePass:
    """One thread per element -> grid-stride loop, the grid capped at one full-occupancy wave of the GPU's SMs."""

    name = "grid_stride"
    group = "grid"  # an alternative to vectorize: both redefine what a thread of the grid does
    exact = True

    def _match(self, unit: Unit) -> dict | None:
        g = element_guard(unit)
        if g is None:
            return None
        for stmt in g.rest:
            if _unsafe(stmt, g.name, sx.identifiers(g.bound)):
                return None
        ctype = sx.type_text(g.type_node)
        if not self._no_overflow(unit, ctype):
            return None
        span = (g.rest[0].start_byte, g.rest[-1].end_byte)
        return {"name": g.name, "type": ctype, "init": g.init, "bound": g.bound, "span": span, "start": g.start, "end": g.end}

    def _no_overflow(self, unit: Unit, ctype: str) -> bool:
        if ctype in sx.WIDE_INT_TYPES:
            return True
        if ctype not in sx.INT_TYPES:
            return False
        threads = unit.block_threads() or 1024
        cap = self.cap(unit)
        spec = unit.spec
        for size in spec.check.sizes + spec.bench.sizes:
            try:
                blocks = int(evaluate(unit.launch.grid[0], size))
            except ExprError:
                return False
            stride = min(blocks, cap or blocks) * threads  # i += gridDim.x * blockDim.x past the last element
            if blocks * threads + stride > 2**31 - 1:
                return False
        return True

    def applies(self, unit: Unit) -> bool:
        return self._match(unit) is not None

    def cap(self, unit: Unit) -> int | None:
        """The grid cap: the blocks of one full-occupancy wave of the unit's GPU (:func:`wave_blocks`); None without its facts."""
        return wave_blocks(unit.notes.get(FACTS_NOTE), unit.block_threads())

    def apply(self, unit: Unit) -> Unit:
        m = self._match(unit)
        data = unit.data
        t = m["type"]
        stride = f"({t})gridDim.x * ({t})blockDim.x"
        indent, _ = sx.line_indent(data, m["start"])
        body = data[m["span"][0]:m["span"][1]].decode()
        head = (
            f"for ({t} {m['name']} = {sx.text(m['init'])}; {m['name']} < {_paren(m['bound'])}; {m['name']} += {stride}) {{"
            "  // grid-stride loop (transform grid_stride)\n"
        )
        text = head + indent.decode() + "    " + body.replace("\n", "\n    ") + "\n" + indent.decode() + "}"
        edits = [(m["start"], m["end"], text.encode())]
        cap = self.cap(unit)
        grid = f"min({unit.launch.grid[0]}, {cap})" if cap is not None else unit.launch.grid[0]
        launch = LaunchConfig(grid=[grid], block=list(unit.launch.block), shared_mem=unit.launch.shared_mem)
        return unit.with_text(sx.apply_edits(data, edits), launch=launch, grid_cap=cap)


class ElementGuard(NamedTuple):
    """The one-thread-per-element opening of a kernel body: the index ``name`` (its type node and initial
    value), the bound ``n`` of the guard, the statements guarded, and the byte span from the index's
    declaration to the end of the guarded code."""

    name: str
    type_node: Node
    init: Node
    bound: Node
    rest: list[Node]
    start: int
    end: int


def element_guard(unit: Unit) -> ElementGuard | None:
    """The module docstring's pattern at the start of a 1-D ``policy = "free"`` kernel's body, in either
    form (``if (i >= n) return; ...`` or a final ``if (i < n) { ... }`` or ``if (i < n) stmt;``), with at least one statement guarded."""
    if unit.body is None or unit.spec.launch.policy != "free" or len(unit.launch.grid) != 1 or not unit.block_is_1d():
        return None
    stmts = sx.statements(unit.body)
    if len(stmts) < 2:
        return None
    index = _index_decl(stmts[0])
    if index is None:
        return None
    name, type_node, init = index
    guard = stmts[1]
    if guard.type != "if_statement" or guard.child_by_field_name("alternative") is not None:
        return None
    cond = sx.unparen(guard.child_by_field_name("condition").child_by_field_name("value"))
    cons = guard.child_by_field_name("consequence")
    bound = _bound(cond, name, (">=",), ("<=",))
    if bound is not None and is_bare_return(cons):
        rest = stmts[2:]
    else:
        bound = _bound(cond, name, ("<",), (">",))
        if bound is None or len(stmts) != 2:
            return None
        rest = sx.statements(cons) if cons.type == "compound_statement" else [cons]
    if not rest:
        return None
    return ElementGuard(name, type_node, init, bound, rest, stmts[0].start_byte, stmts[-1].end_byte)


def _index_decl(stmt: Node) -> tuple[str, Node, Node] | None:
    """``(name, type node, initial value)`` of ``T i = blockIdx.x * blockDim.x + threadIdx.x;``."""
    if stmt.type != "declaration":
        return None
    ds = stmt.children_by_field_name("declarator")
    if len(ds) != 1 or ds[0].type != "init_declarator" or not sx.is_ident(ds[0].child_by_field_name("declarator")):
        return None
    if any(c.type == "type_qualifier" and sx.text(c) != "const" for c in stmt.children):
        return None
    value = ds[0].child_by_field_name("value")
    e = sx.unparen(value)
    if e is None or e.type != "binary_expression" or sx.operator(e) != "+":
        return None
    a, b = e.child_by_field_name("left"), e.child_by_field_name("right")
    if sx.is_builtin(a, "threadIdx"):
        a, b = b, a
    if not sx.is_builtin(b, "threadIdx"):
        return None
    prod = sx.uncast(a)
    if prod is None or prod.type != "binary_expression" or sx.operator(prod) != "*":
        return None
    factors = (prod.child_by_field_name("left"), prod.child_by_field_name("right"))
    if not ({"blockIdx", "blockDim"} == {v for f in factors for v in ("blockIdx", "blockDim") if sx.is_builtin(f, v)}):
        return None
    return sx.text(ds[0].child_by_field_name("declarator")), stmt.child_by_field_name("type"), value


def _bound(cond: Node | None, name: str, ops_left: tuple[str, ...], ops_right: tuple[str, ...]) -> Node | None:
    """``n`` of ``i <op> n`` (op in ops_left) or ``n <op> i`` (op in ops_right)."""
    if cond is None or cond.type != "binary_expression":
        return None
    left, right, op = cond.child_by_field_name("left"), cond.child_by_field_name("right"), sx.operator(cond)
    if op in ops_left and sx.is_ident(sx.unparen(left), name):
        return right
    if op in ops_right and sx.is_ident(sx.unparen(right), name):
        return left
    return None


def is_bare_return(node: Node | None) -> bool:
    """``node`` is ``return;`` or ``{ return; }``."""
    if node is not None and node.type == "compound_statement":
        stmts = sx.statements(node)
        node = stmts[0] if len(stmts) == 1 else None
    return node is not None and node.type == "return_statement" and node.named_child_count == 0


def _unsafe(stmt: Node, index: str, bound_names: set[str]) -> bool:
    if sx.contains_type(stmt, ("return_statement", "goto_statement", "labeled_statement")):
        return True
    if sx.contains_call(stmt, COLLECTIVES):
        return True
    names = sx.identifiers(stmt)
    if names & {"threadIdx", "blockIdx", "blockDim", "gridDim"}:
        return True
    if any(n.type in ("type_qualifier", "storage_class_specifier") and sx.text(n) in ("__shared__", "static") for n in sx.walk(stmt)):
        return True
    return bool(sx.written_names(stmt) & ({index} | bound_names))


def _paren(node: Node) -> str:
    t = sx.text(node)
    simple = ("identifier", "number_literal", "parenthesized_expression", "field_expression", "cast_expression",
              "subscript_expression", "call_expression")
    return t if node.type in simple else f"({t})"
