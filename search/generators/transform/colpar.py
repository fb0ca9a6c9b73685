"""``colpar``: a column reduction written one thread per column gets a 2-D block: columns along x, each column's rows
split across y.

Pattern: :mod:`.rowpar`'s one-thread-per-row opening (``T c = blockIdx.x * blockDim.x + threadIdx.x;``, then ``if
(c >= n) return;`` or a final ``if (c < n) {...}``; :mod:`.opening`'s tolerant reading, 2-D/3-D grids with a
block-uniform batch index included: meanpool's ``int b = blockIdx.y; if (c >= C || b >= B) return;``, where a block
past the last batch goes through the barriers and leaves as a whole), read as one thread per column, whose loops walk the column: every
buffer access in a split loop that moves with the loop variable is ``a * r + c + b`` with ``a`` not 1 (``x[r * N +
c]``, ``dy[(size_t)r * ld + c]``): consecutive threads read consecutive elements, one iteration a row apart. That is
the kernel :mod:`.rowpar` refuses (its lanes would read a stride apart); loops contiguous along ``r`` are rowpar's and
refused here. Column sums, means, max/min, arg max, sums of squares and norms, bias gradients (``db[c] = sum_r
dy[r * N + c]``) fit, and tuples: an online softmax's (max, sum) (a softmax over channels after ``online_softmax``)
and a Welford, their parts merged in the order of ``threadIdx.y`` (``ptxf_col_merge``).

The rewrite is rowpar's walk over the column's code (the same proofs: :mod:`.reductions` recognises the accumulators,
:func:`.affine.independent` proves the writes distinct; stores outside the loops by one thread), with the column's
``Y`` threads along ``threadIdx.y`` (``ptxf_lane``): a split loop becomes ``for (T r = a + ptxf_lane; r < b; r += Y)``
and each accumulator is combined across y in shared memory after the loop, in the order of ``threadIdx.y`` (so
results repeat bit for bit), every thread of the column getting the value; ``threadIdx.y == 0`` stores. The combine
needs the whole block at a barrier, and threads past the last column would have left at the guard: they instead take
part in the same number of barriers (``ptxf_col_idle``) and then leave. The barrier is ``barrier.sync`` without
``.aligned`` (sm_70 and later), which threads may reach from different places.

The launch: block ``[32, Y]`` with ``Y`` in {4, 8, 16, 32}, or (``auto``) ``[X, Y]`` chosen at launch: ``X`` = 32
columns, or 8 (an fp32 row segment of one 32-byte sector) when blocks of 32 columns would not give every SM one (with
the GPU's facts), and ``Y`` the smallest power of two giving each thread at most :data:`ROWS_PER_THREAD`
rows and (with the facts) one full-occupancy wave over all columns, but no more threads than rows (the power of two
at or above) and at most ``1024 / X``. The grid is the column count (the guard's bound through the spec's scalars,
else the original grid's threads) over ``X``; a 2-D/3-D grid keeps its dimensions past x (the batches).

Refused, besides rowpar's own refusals (shared memory, barriers, ``threadIdx`` in the column's code, carried variables
that are not accumulations, writes two iterations may share, ...): a grid-stride loop over columns (blocks would run
different numbers of combines), a split loop that is not a statement of the column's code itself (inside an ``if`` or
another loop: its combine's barrier would not be reached by every thread), a ``return`` in the column's code, a buffer
written and read back in the column's code (it would need a barrier among the column's threads where others may not
arrive), a split loop that does not walk a column, and a launch out of range at a spec size. Not done: splitting rows
across blocks (``grid.y``) for very few columns: the partial results would need a second stage (a workspace the spec
does not give) or float atomics on a zeroed output (non-deterministic, and the kernel's own store does not zero it).
"""
from __future__ import annotations

import re

from ptxfactory.protocol import LaunchConfig
from ptxfactory.protocol.expr import ExprError, evaluate

from . import syntax as sx
from .base import Unit
from .grid_stride import FACTS_NOTE, ElementGuard, threads_per_sm
from .rowpar import (LANE, MAX_GRID, Refused, RowLoop, RowParallelPass, batch_count, helper_closure, index_edit,
                     rows_expression)
from .unflatten import Refused as NotFlat, unflatten
from .syntax import Node

ROWS_PER_THREAD = 16  # colpar_auto: the most rows of its column one thread sums before the combine

SPLITS = (4, 8, 16, 32)  # threads per column of the fixed variants
COLUMNS = 32  # columns per block (a warp's consecutive columns)
NARROW = 8  # columns per block of the auto variant when columns are few (8 fp32: one 32-byte sector a row)
MAX_BLOCK = 1024
# rowpar's reduction and sync helpers -> this pass's
NAMES = {"ptxf_row_reduce": "ptxf_col_reduce", "ptxf_row_reduce_arg": "ptxf_col_reduce_arg",
         "ptxf_row_merge": "ptxf_col_merge", "ptxf_row_sync": "ptxf_col_sync", "ptxf_row_sync();": "ptxf_col_sync();"}
COMBINE_CALL = re.compile(r"\bptxf_col_(?:reduce(?:_arg)?|merge)\(")
BARRIERS_PER_COMBINE = 2

HELPERS = {
    "ptxf_col_bar": """\
static __device__ __forceinline__ void ptxf_col_bar()
{   // a block barrier that threads may reach from different places (barrier.sync without .aligned, sm_70 and later)
    asm volatile("barrier.sync 0;" ::: "memory");
}""",
    "ptxf_col_idle": """\
static __device__ __forceinline__ void ptxf_col_idle(int n)
{   // a thread past the last column takes part in the n barriers of the columns' combines
    for (int i = 0; i < n; ++i) ptxf_col_bar();
}""",
    "ptxf_col_reduce": """\
template <typename T, typename F>
static __device__ __forceinline__ T ptxf_col_reduce(T v, F op)
{   // op over the column's blockDim.y threads (one threadIdx.x), in the order of threadIdx.y; every one gets it
    __shared__ T part[1024];
    ptxf_col_bar();  // the last combine's reads are done
    part[threadIdx.y * blockDim.x + threadIdx.x] = v;
    ptxf_col_bar();
    v = part[threadIdx.x];
    for (unsigned y = 1; y < blockDim.y; ++y) v = op(v, part[y * blockDim.x + threadIdx.x]);
    return v;
}""",
    "ptxf_col_merge": """\
template <typename P>
static __device__ __forceinline__ void ptxf_col_merge(P& p)
{   // a tuple's parts (online softmax, Welford) over the column's threads, merged in the order of threadIdx.y
    __shared__ P part[1024];
    ptxf_col_bar();  // the last combine's reads are done
    part[threadIdx.y * blockDim.x + threadIdx.x] = p;
    ptxf_col_bar();
    p = part[threadIdx.x];
    for (unsigned y = 1; y < blockDim.y; ++y) p.merge(part[y * blockDim.x + threadIdx.x]);
}""",
    "ptxf_col_reduce_arg": """\
template <typename T, typename K, typename B>
static __device__ __forceinline__ void ptxf_col_reduce_arg(T& v, K& k, B better)
{   // (value, index) pairs over the column's threads, in the order of threadIdx.y; better(v2, k2, v, k): (v2, k2) wins
    __shared__ T pv[1024];
    __shared__ K pk[1024];
    ptxf_col_bar();
    pv[threadIdx.y * blockDim.x + threadIdx.x] = v;
    pk[threadIdx.y * blockDim.x + threadIdx.x] = k;
    ptxf_col_bar();
    v = pv[threadIdx.x];
    k = pk[threadIdx.x];
    for (unsigned y = 1; y < blockDim.y; ++y) {
        const unsigned u = y * blockDim.x + threadIdx.x;
        if (better(pv[u], pk[u], v, k)) { v = pv[u]; k = pk[u]; }
    }
}""",
}


class ColumnParallelPass(RowParallelPass):
    """One thread per column -> a block of columns along x with ``split`` threads per column along y (``"auto"``:
    chosen at launch). See the module docstring."""

    group = "grid"  # an alternative to rowpar, vectorize and grid_stride: all redefine what a thread does
    exact = False  # sums are re-associated (max, min and arg reductions are exact)

    def __init__(self, split: int | str):
        if split not in (*SPLITS, "auto"):
            raise ValueError(f"colpar: threads per column must be one of {SPLITS} or 'auto', not {split!r}")
        self.lanes = split
        self.auto = split == "auto"
        self.block = False
        self.name = "colpar_auto" if self.auto else f"colpar_rows{split}"
        self.step = "blockDim.y" if self.auto else str(split)

    # -- precondition (rowpar's _plan, with this layout's checks and launch) ----------------------------------

    def _check_layout(self, walk, g: ElementGuard, rw) -> None:
        """Raises :class:`Refused` unless every split loop walks a column and sits in the column's code itself, the
        guard opens the kernel (no grid-stride loop), and nothing in the column's code returns or needs a barrier."""
        if isinstance(g, RowLoop):
            raise Refused("a grid-stride loop over columns: a block's threads would run different numbers of combines")
        top = {(s.start_byte, s.end_byte) for s in g.rest}
        for s in g.rest:
            if sx.contains_type(s, ("return_statement",)):
                raise Refused(f"a return in the column's code (line {s.start_point[0] + 1}): every thread must reach the combines")
        for loop, j in rw.loops:
            line = loop.start_point[0] + 1
            if (loop.start_byte, loop.end_byte) not in top:
                raise Refused(f"the loop at line {line} is inside another statement: its combine's barrier would not be "
                              "reached by every thread of the block")
            if not walk.strides_columns(loop, j, g.name):
                raise Refused(f"the loop at line {line} does not walk a column (its accesses along {j} are not a stride "
                              f"apart with consecutive threads on consecutive elements): rowpar's case, or neither")
        if any(NAMES["ptxf_row_sync"].encode() in text for _, _, text in rw.edits):
            raise Refused("a buffer written and read back in the column's code: its threads would need a barrier")

    def _fn(self, auto: str, block: str, group: str) -> str:
        return NAMES[auto]

    def merges_tuples(self) -> bool:
        return True  # (ptxf_col_merge: an online softmax's or a Welford's parts, in the order of threadIdx.y)

    def _launch(self, unit: Unit, g: ElementGuard, threads: int, rw) -> LaunchConfig:
        cols = rows_expression(unit, g.bound) or f"({unit.launch.grid[0]}) * {threads}"
        if self.auto:
            if rw.length is None:
                raise Refused("the split loop's length is not an expression of the spec's sizes (threads per column cannot follow it)")
            x, y = self.auto_shape(unit, cols, rw.length)
        else:
            x, y = COLUMNS, self.lanes
        grid = f"cdiv({cols}, {x})"
        for size in unit.spec.check.sizes + unit.spec.bench.sizes:
            try:
                if not 0 < int(evaluate(grid, size)) <= MAX_GRID:
                    raise Refused(f"grid {grid} out of range at {size}")
                bx, by = int(evaluate(x, size)), int(evaluate(y, size))
            except ExprError as e:
                raise Refused(f"launch {grid} / [{x}, {y}] cannot be evaluated at {size}: {e}") from None
            if bx < 1 or by < 1 or bx * by > MAX_BLOCK:
                raise Refused(f"block [{x}, {y}] out of range at {size}")
        return LaunchConfig(grid=[grid, *unit.launch.grid[1:]], block=[x, y], shared_mem=unit.launch.shared_mem)

    @staticmethod
    def auto_shape(unit: Unit, cols: str, rows: str) -> tuple[str, str]:
        """``(X, Y)``: columns per block and threads per column as expressions of the sizes, for ``cols`` columns of
        ``rows`` rows (see the module docstring; the GPU's facts from the unit's notes; a 2-D/3-D grid's batches count
        toward the wave)."""
        facts = unit.notes.get(FACTS_NOTE)
        want = f"cdiv({rows}, {ROWS_PER_THREAD})"
        x = str(COLUMNS)
        if facts is not None:
            batches = batch_count(unit)  # a 2-D/3-D grid's batches: each its own blocks of columns
            per = "" if batches is None else f" * {batches}"
            x = f"{NARROW} + {COLUMNS - NARROW} * min(1, cdiv({cols}, {COLUMNS}){per} // {facts.sm_count})"
            want = f"max({want}, cdiv({facts.sm_count * threads_per_sm(facts.arch)}, {cols}{per}))"
        w = f"max(0, min({rows}, {want}) - 1)"  # no more threads than rows
        tiers = [2**k for k in range(10)]  # 1 .. 512: the sum below is the smallest power of two >= want
        y = "1" + "".join(f" + {t} * min(1, {w} // {t})" for t in tiers)
        return x, f"min({MAX_BLOCK} // ({x}), {y})"

    # -- rewrite ------------------------------------------------------------------------------------------

    def _reading(self, unit: Unit) -> Unit:
        """``unit`` as the pass reads it: as written, or a 1-D kernel whose flat index is taken apart by ``/`` and
        ``%`` with its outer digits as a block-uniform batch (:func:`.unflatten.unflatten`, ``batch``): a reduction
        over a middle dimension (``b = idx / D; d = idx % D; for (n ...) s += x[(b * N + n) * D + d];``)."""
        try:
            self._plan(unit)
            return unit
        except Refused as first:
            if len(unit.launch.grid) != 1:
                raise
            try:
                flat = unflatten(unit, batch=True)
            except NotFlat:
                raise first from None
            try:
                self._plan(flat)
            except Refused as e:
                raise Refused(f"{first} (nor with its flat index's outer digits as a batch: {e})") from None
            return flat

    def apply(self, unit: Unit) -> Unit:
        unit = self._reading(unit)
        g, rw, launch = self._plan(unit)
        data = unit.data
        how = "blockDim.y threads per column, chosen at launch" if self.auto else f"{self.lanes} threads per column"
        index = f"({sx.type_text(g.type_node)})((unsigned long long)blockIdx.x * blockDim.x + threadIdx.x)"
        edits = [index_edit(unit, g, index, f"{how}, rows split (transform colpar)",
                            f"const unsigned {LANE} = threadIdx.y;")] + rw.edits
        combines = sum(len(COMBINE_CALL.findall(text.decode())) for _, _, text in rw.edits)
        used = list(dict.fromkeys(rw.helpers))
        if combines:
            edits.append(_idle_edit(unit, g, combines * BARRIERS_PER_COMBINE))
            used.append("ptxf_col_idle")
        # the tuple parts (ptxf_softmax, ptxf_welford and what they need) are rowpar's, before this pass's combines
        parts = helper_closure([n for n in used if n not in HELPERS])
        helpers = parts + [(n, HELPERS[n]) for n in HELPERS if n == "ptxf_col_bar" or n in used]
        return unit.with_text(sx.apply_edits(data, edits), launch=launch, helpers=helpers, lanes=self.lanes)


def _idle_edit(unit: Unit, g: ElementGuard, barriers: int) -> tuple[int, int, bytes]:
    """The edit sending threads past the last column through ``barriers`` barriers before they leave: ``if (c >= n)
    return;`` -> ``if (c >= n) { ptxf_col_idle(B); return; }``, ``if (c < n) {...}`` -> ``... else { ptxf_col_idle(B); }``."""
    idle = f"ptxf_col_idle({barriers});"
    inner = g.rest[0].parent
    guard = inner.parent if inner is not None and inner.type == "compound_statement" else None
    if guard is not None and guard.type == "if_statement" and guard.child_by_field_name("consequence") == inner:
        ind = sx.line_indent(unit.data, guard.start_byte)[0].decode()
        return inner.end_byte, inner.end_byte, f" else {{  // past the last column (transform colpar)\n{ind}    {idle}\n{ind}}}".encode()
    guard = _guard_before(unit, g)
    cons = guard.child_by_field_name("consequence")
    return cons.start_byte, cons.end_byte, f"{{ {idle} return; }}".encode()


def _guard_before(unit: Unit, g: ElementGuard) -> Node:
    """The ``if (c >= n) return;`` guard: the last ``if`` statement of the body before the column's code."""
    first = g.rest[0].start_byte
    return [s for s in sx.statements(unit.body) if s.type == "if_statement" and s.end_byte <= first][-1]
