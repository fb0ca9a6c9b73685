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

The opening is :mod:`.opening`'s tolerant reading (aliases of ``threadIdx.x``, extra uniform parts of the guard, which
join the loop's condition: ``if (i >= n || N <= 0) return;`` -> ``i < n && !((N <= 0))``).

Preconditions: a 1-D launch with ``policy = "free"``; with the GPU's facts, a grid larger than the cap at some bench
size (where it fits one wave at every one, the loop would run once per thread: refused; the pass is not a restructuring
one, which say ``why_not`` and lead the plan, so the report does not list it); ``rest`` has no ``return``, barrier, warp
collective, ``__shared__`` data or use of ``threadIdx``/``blockIdx``/``blockDim``/``gridDim``; ``i``
and the names in ``n`` are not written in ``rest``; a 32-bit index does not overflow at the spec's
sizes (the original grid's threads plus one stride, capped or not, stay below 2^31).
"""
from __future__ import annotations

import math

from ptxfactory.protocol import LaunchConfig
from ptxfactory.protocol.expr import ExprError, evaluate

from . import syntax as sx
from .base import Unit
from .opening import ElementGuard, _bound, _index_decl, element_guard, element_hazard, is_bare_return, paren  # noqa: F401 (re-exported)
from .syntax import Node

FACTS_NOTE = "facts"  # the unit note holding the GPU's facts (protocol GpuFacts), when the job has a GPU
# Maximum resident threads per SM by compute capability (CUDA C++ Programming Guide, "Technical
# Specifications per Compute Capability"); an architecture not listed gets the largest, 2048.
THREADS_PER_SM = {75: 1024, 80: 2048, 86: 1536, 87: 2048, 89: 1536, 90: 2048, 100: 2048, 103: 2048, 120: 1536, 121: 1536}
MAX_THREADS_PER_SM = 2048
UNKNOWN_BLOCK = 256  # threads assumed for a block that is not an integer literal


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


def most_blocks(grid: list, sizes: list[dict[str, int]]) -> int | None:
    """The most blocks a launch of ``grid`` (spec expressions, one per dimension) has at any of ``sizes``; None without
    sizes or where an expression cannot be evaluated at one."""
    most = None
    for size in sizes:
        try:
            blocks = math.prod(int(evaluate(g, size)) for g in grid)
        except ExprError:
            return None
        most = blocks if most is None else max(most, blocks)
    return most


class GridStridePass:
    """One thread per element -> grid-stride loop, the grid capped at one full-occupancy wave of the GPU's SMs."""

    name = "grid_stride"
    group = "grid"  # an alternative to vectorize: both redefine what a thread of the grid does
    exact = True

    def _match(self, unit: Unit) -> dict | None:
        g = element_guard(unit, tolerant=True)
        if g is None:
            return None
        for stmt in g.rest:
            if element_hazard(stmt, g.name, sx.identifiers(g.bound)) is not None:
                return None
        ctype = sx.type_text(g.type_node)
        if not self._no_overflow(unit, ctype):
            return None
        span = (g.rest[0].start_byte, g.rest[-1].end_byte)
        return {"name": g.name, "type": ctype, "init": g.init, "bound": g.bound, "span": span, "start": g.start, "end": g.end,
                "keep": g.keep()}

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

    def _one_wave(self, unit: Unit) -> int | None:
        """The most blocks the grid has at a bench size, when that is within the cap (one wave of the GPU) at every
        one: there the loop would run once per thread, the original plus a loop's cost. None otherwise, or without
        the GPU's facts (no cap: the candidate keeps the grid and is proposed, as the job cannot tell)."""
        cap = self.cap(unit)
        most = most_blocks(unit.launch.grid[:1], unit.spec.bench.sizes) if cap is not None else None
        return most if most is not None and most <= cap else None

    def applies(self, unit: Unit) -> bool:
        if self._one_wave(unit) is not None:
            return False
        return self._match(unit) is not None or (self.cap(unit) is not None and strided_already(unit))

    def cap(self, unit: Unit) -> int | None:
        """The grid cap: the blocks of one full-occupancy wave of the unit's GPU (:func:`wave_blocks`); None without its facts."""
        return wave_blocks(unit.notes.get(FACTS_NOTE), unit.block_threads())

    def apply(self, unit: Unit) -> Unit:
        m = self._match(unit)
        if m is None:  # a kernel written as a grid-stride loop: its grid alone is capped
            cap = self.cap(unit)
            launch = LaunchConfig(grid=[f"min({unit.launch.grid[0]}, {cap})"], block=list(unit.launch.block),
                                  shared_mem=unit.launch.shared_mem)
            return unit.with_text(unit.data, launch=launch, grid_cap=cap)
        data = unit.data
        t = m["type"]
        stride = f"({t})gridDim.x * ({t})blockDim.x"
        indent, _ = sx.line_indent(data, m["start"])
        body = data[m["span"][0]:m["span"][1]].decode()
        head = (
            f"for ({t} {m['name']} = {sx.text(m['init'])}; {m['keep']}; {m['name']} += {stride}) {{"
            "  // grid-stride loop (transform grid_stride)\n"
        )
        text = head + indent.decode() + "    " + body.replace("\n", "\n    ") + "\n" + indent.decode() + "}"
        edits = [(m["start"], m["end"], text.encode())]
        cap = self.cap(unit)
        grid = f"min({unit.launch.grid[0]}, {cap})" if cap is not None else unit.launch.grid[0]
        launch = LaunchConfig(grid=[grid], block=list(unit.launch.block), shared_mem=unit.launch.shared_mem)
        return unit.with_text(sx.apply_edits(data, edits), launch=launch, grid_cap=cap)


GRID_INDEX = {("blockDim.x", "blockIdx.x"): 1, ("threadIdx.x",): 1}  # blockIdx.x * blockDim.x + threadIdx.x, as a polynomial
GRID_SIZE = {("blockDim.x", "gridDim.x"): 1}  # gridDim.x * blockDim.x: a grid-stride loop's step


def strided_already(unit: Unit) -> bool:
    """The kernel is written as grid-stride loops over a 1-D launch (``for (i = blockIdx.x * blockDim.x + threadIdx.x;
    i < n; i += blockDim.x * gridDim.x)``, the stride possibly a local declared once): ``threadIdx``, ``blockIdx`` and
    ``gridDim`` appear in nothing but those loops' headers and the index's and stride's declarations, nothing may change
    those locals, and no variable carries a thread's state from one element to the next, so every grid computes the
    same (a user's own cap of 65535 blocks can become one wave)."""
    from .affine import poly

    body = unit.body
    if body is None or unit.spec.launch.policy != "free" or not unit.block_is_1d() or len(unit.launch.grid) != 1:
        return False
    written = sx.written_names(body)
    decls: dict[str, Node] = {}  # locals declared once, never written: name -> value
    counts = sx.declaration_counts(unit.fn)
    for n in sx.walk(body):
        if n.type == "init_declarator" and sx.is_ident(n.child_by_field_name("declarator")):
            name = sx.text(n.child_by_field_name("declarator"))
            if counts.get(name) == 1 and name not in written:
                decls[name] = n.child_by_field_name("value")

    def value(node: Node | None) -> dict | None:
        node = sx.uncast(node)
        if sx.is_ident(node) and sx.text(node) in decls:
            node = decls[sx.text(node)]
        return poly(node)

    allowed: list[tuple[int, int]] = []  # byte spans where blockIdx.x / gridDim.x may appear
    loops = 0
    for n in sx.walk(body):
        if n.type == "for_statement":
            init, upd = n.child_by_field_name("initializer"), sx.unparen(n.child_by_field_name("update"))
            ds = init.children_by_field_name("declarator") if init is not None and init.type == "declaration" else []
            if len(ds) != 1 or ds[0].type != "init_declarator" or upd is None or upd.type != "assignment_expression" \
                    or sx.operator(upd) != "+=":
                continue
            j = sx.text(ds[0].child_by_field_name("declarator"))
            if value(upd.child_by_field_name("right")) == GRID_SIZE and value(ds[0].child_by_field_name("value")) == GRID_INDEX \
                    and j not in sx.written_names(n.child_by_field_name("body")):
                allowed += [(init.start_byte, init.end_byte), (upd.start_byte, upd.end_byte)]
                loops += 1
        elif n.type == "init_declarator" and value(n.child_by_field_name("value")) in (GRID_SIZE, GRID_INDEX) \
                and sx.is_ident(n.child_by_field_name("declarator")) and sx.text(n.child_by_field_name("declarator")) in decls:
            allowed.append((n.start_byte, n.end_byte))
    if not loops:
        return False
    maybe = sx.maybe_written_names(body)
    for n in sx.walk(body):
        inside = any(a <= n.start_byte < b for a, b in allowed)
        if any(sx.is_builtin(n, v, f) for v in ("blockIdx", "gridDim", "threadIdx") for f in "xyz"):
            if not inside:
                return False  # (if (threadIdx.x == 0) atomicAdd(p, 1): one a block, as many as the grid's blocks)
        elif sx.is_ident(n) and sx.text(n) in decls and value(n) in (GRID_INDEX, GRID_SIZE):
            if not inside or sx.text(n) in maybe:
                return False  # the thread's index or the stride read elsewhere (y[i] = i / stride), or changed by a call
    for loop in (n for n in sx.walk(body) if n.type == "for_statement"):
        inner = sx.written_names(loop.child_by_field_name("body")) - sx.declared_names(loop)
        if inner & sx.declared_names(body):  # a thread's state carried from one element to the next (a count, a flag)
            return False
    return True


def _paren(node: Node) -> str:
    return paren(node)
