"""``coarsen_K``: a one-thread-per-element kernel gives each thread ``K`` elements, all ``K`` loads issued before use.

Pattern (the kernel body starts with it; :mod:`.opening`'s tolerant reading, as for ``grid_stride``)::

    T i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;            // or: if (i < n) { ... } (or one statement) as the last statement
    ...rest...

becomes (a block of ``B = blockDim.x`` threads now covers ``K * B`` consecutive indices; chunk ``k`` of thread ``t``
is index ``blockIdx.x * K * B + k * B + t``, so each chunk is coalesced)::

    const T ptxf_c0 = (T)blockIdx.x * ((T)blockDim.x * K) + (T)threadIdx.x;
    bool ptxf_full;  // the block's last index in bounds: so is every one of the block
    { const T i = (T)blockIdx.x * ((T)blockDim.x * K) + ((T)blockDim.x * K - 1); ptxf_full = <keep>; }
    if (ptxf_full) {
    #pragma unroll
        for (int ptxf_k = 0; ptxf_k < K; ++ptxf_k) { const T i = ptxf_c0 + (T)ptxf_k * (T)blockDim.x; ...rest... }
    } else {
        for (int ptxf_k = 0; ptxf_k < K; ++ptxf_k) { const T i = ...; if (!(<keep>)) break; ...rest... }
    }

``<keep>`` is the guard's keep condition (``i < n`` and its extra uniform parts: :meth:`.opening.ElementGuard.keep`).
In a full block the unrolled loop has no bound check between the chunks, so the compiler may hoist all ``K``
chunks' loads ahead of their uses (``K`` loads in flight per thread, what ``grid_stride``'s checked loop does not
give, and what ``vectorize`` gives only to ``p[i]`` accesses); the last, partial block checks each chunk (the
indices grow with ``k``, so the first out of bounds ends the thread's work). The 1-D grid ``G`` becomes
``cdiv(G, K)``; the block stays. Every element is still computed by exactly one thread with the same code, so
results are exact. Aliases of ``threadIdx.x``/``blockIdx.x``/``blockDim.x`` declared before the index stay (unused).

Preconditions (each refusal says what it saw: :meth:`CoarsenPass.why_not`): the opening; a 1-D grid and block with
``policy = "free"``; ``rest`` has no loop but ``for`` loops of at most 64 iterations between literal bounds or
``#define`` constants (a filter's taps; a loop over a row is rowpar's, and a thread per row must not take ``K`` rows), no ``return``/``goto``/label, barrier, warp collective, ``__shared__`` or ``static`` data, no use of
``threadIdx``/``blockIdx``/``blockDim``/``gridDim``; the index and the names in ``n`` are not written (nor their
address taken) in ``rest``; a 32-bit index does not overflow at the spec's check and bench sizes (``cdiv(G, K) * B *
K`` plus one block's ``B * K`` stays below 2^31; a block that is not a literal counts as 1024 threads).
"""
from __future__ import annotations

from ptxfactory.protocol import LaunchConfig
from ptxfactory.protocol.expr import ExprError, evaluate

from . import syntax as sx
from .base import Unit
from .opening import ElementGuard, element_guard, element_hazard
from .syntax import Node

FACTORS = (4, 8)  # elements per thread of the variants the registry may hold
MAX_BLOCK = 1024  # threads assumed for a block that is not an integer literal


class CoarsenPass:
    """One thread per element -> ``k`` elements per thread, ``blockDim.x`` apart, the grid ``cdiv(G, k)``."""

    group = "grid"  # an alternative to vectorize and grid_stride: all redefine what a thread of the grid does
    exact = True

    def __init__(self, k: int):
        if k not in FACTORS:
            raise ValueError(f"coarsen: elements per thread must be one of {FACTORS}, not {k!r}")
        self.k = k
        self.name = f"coarsen_{k}"

    # -- precondition -------------------------------------------------------------------------------------

    def _match(self, unit: Unit) -> tuple[ElementGuard | None, str | None]:
        """``(guard, None)`` when the pass applies, else ``(None, reason)``."""
        if unit.body is None:
            return None, "no kernel body to read (the text does not parse as a kernel, or a macro could not be expanded)"
        policy = unit.spec.launch.policy
        if policy != "free":
            return None, f'the launch policy is "{policy}", not "free": the grid may not change'
        if len(unit.launch.grid) != 1:
            return None, f"the grid {list(unit.launch.grid)} is not 1-D"
        if not unit.block_is_1d():
            return None, f"the block {list(unit.launch.block)} is not 1-D"
        why: list[str] = []
        g = element_guard(unit, tolerant=True, why=why)
        if g is None:
            detail = f" ({why[0]})" if why else ""
            return None, ("no one-thread-per-element opening (T i = blockIdx.x * blockDim.x + threadIdx.x; "
                          f"if (i >= n) return; ...){detail}")
        bound_names = sx.identifiers(g.bound)
        if g.name in bound_names:
            return None, f"the bound {sx.text(g.bound)!r} reads the index {g.name!r}"
        for stmt in g.rest:
            reason = element_hazard(stmt, g.name, bound_names, loop_ok=_short_loop(unit))
            if reason:
                return None, f"line {stmt.start_point[0] + 1}: {reason}"
        ctype = sx.type_text(g.type_node)
        reason = self._overflow(unit, ctype)
        if reason:
            return None, reason
        return g, None

    def _overflow(self, unit: Unit, ctype: str) -> str | None:
        """Why the index of type ``ctype`` could overflow at a spec size (None when it cannot)."""
        if ctype in sx.WIDE_INT_TYPES:
            return None
        if ctype not in sx.INT_TYPES:
            return f"the index's type {ctype!r} is not an integer type the pass knows"
        threads = unit.block_threads() or MAX_BLOCK
        spec = unit.spec
        grid = unit.launch.grid[0]
        for size in spec.check.sizes + spec.bench.sizes:
            try:
                blocks = int(evaluate(grid, size))
            except ExprError:
                return f"the grid {grid!r} cannot be evaluated at the size {dict(size)}"
            span = threads * self.k
            top = -(-blocks // self.k) * span + span  # the new grid's indices plus one block's (the full check)
            if top > 2**31 - 1:
                return f"a 32-bit index ({ctype}) could overflow at the size {dict(size)}: {top} indices"
        return None

    def why_not(self, unit: Unit) -> str | None:
        """Why the pass refuses ``unit`` (None when it applies)."""
        return self._match(unit)[1]

    def applies(self, unit: Unit) -> bool:
        return self.why_not(unit) is None

    # -- rewrite --------------------------------------------------------------------------------------------

    def apply(self, unit: Unit) -> Unit:
        g, reason = self._match(unit)
        if g is None:
            raise ValueError(f"{self.name} does not apply: {reason}")
        data, k = unit.data, self.k
        t = sx.type_text(g.type_node)
        keep = g.keep()
        ind = sx.line_indent(data, g.start)[0].decode()
        body = data[g.rest[0].start_byte:g.rest[-1].end_byte].decode()
        inner = ind + " " * 12
        body = body.replace("\n", "\n" + " " * 12)  # the statements' own lines, 12 columns deeper
        span = f"(({t})blockDim.x * {k})"
        index = f"const {t} {g.name} = ptxf_c0 + ({t})ptxf_k * ({t})blockDim.x;"
        loop = f"for (int ptxf_k = 0; ptxf_k < {k}; ++ptxf_k) {{"
        lines = [
            f"{{   // coarsen (transform): {k} elements per thread, blockDim.x apart",
            f"{ind}    const {t} ptxf_c0 = ({t})blockIdx.x * {span} + ({t})threadIdx.x;",
            f"{ind}    bool ptxf_full;",
            f"{ind}    {{ const {t} {g.name} = ({t})blockIdx.x * {span} + ({span} - 1); ptxf_full = {keep}; }}",
            f"{ind}    if (ptxf_full) {{  // every index of the block in bounds: no bound check between the loads",
            "#pragma unroll",
            f"{ind}        {loop}",
            f"{inner}{index}",
            f"{inner}{body}",
            f"{ind}        }}",
            f"{ind}    }} else {{",
            f"{ind}        {loop}",
            f"{inner}{index}",
            f"{inner}if (!({keep})) break;",
            f"{inner}{body}",
            f"{ind}        }}",
            f"{ind}    }}",
            f"{ind}}}",
        ]
        edits = [(g.start, g.end, "\n".join(lines).encode())]
        launch = LaunchConfig(grid=[f"cdiv({unit.launch.grid[0]}, {k})"], block=list(unit.launch.block),
                              shared_mem=unit.launch.shared_mem)
        return unit.with_text(sx.apply_edits(data, edits), launch=launch, coarsen=k)


SHORT_LOOP = 64  # iterations of a loop with literal bounds that an element's code may hold (a filter's taps)


def _short_loop(unit: Unit):
    """A ``for`` loop of at most :data:`SHORT_LOOP` iterations between literal bounds (or the file's ``#define``
    constants), or whose bound the spec's values give at most that at every bench size (a window ``K`` the launcher
    fixes at 3), is part of the element's work (a 7-tap filter), not a row."""
    from .rowpar import loop_trips

    constants = unit.notes.get("constants")

    def short(n: Node) -> bool:
        if n.type != "for_statement":
            return False
        t = sx.literal_trips(n, constants)
        if t is None:
            t = loop_trips(unit, n)
        return t is not None and t <= SHORT_LOOP
    return short
