"""``rowpar``: a kernel written one thread per row gets a group of lanes per row (a sub-warp, a warp, or a block).

Pattern: the one-thread-per-row opening that ``grid_stride`` also reads (:mod:`.opening`: ``T r = blockIdx.x *
blockDim.x + threadIdx.x;``, declarations, then ``if (r >= n) return;`` or a final ``if (r < n)
{...}``; tolerant: uniform scalar parts of the guard, ``if (r >= M || N <= 0) return;``, aliases of ``threadIdx.x``,
other declarators beside ``r``, and a 2-D/3-D grid whose y/z index is a block-uniform batch index, ``int b =
blockIdx.y;``, which stays a value every lane of a row shares, usable anywhere), then the row's code; or a grid-stride loop over rows (``for (T r = blockIdx.x * blockDim.x
+ threadIdx.x; r < n; r += blockDim.x * gridDim.x) {...}``), which then strides over groups of lanes. What the pass does to the row's code, statement by statement (recursing into blocks and
``if``/``else``, whose conditions are the same for every lane of a row, see below):

- a ``for (T j = a; j < b; j++)`` loop whose iterations are independent apart from recognised
  accumulations (:mod:`.reductions`: sums, products, max, min, arg max/min, tuples) becomes ``for (T j = a +
  lane; j < b; j += L)``; lanes other than the first start a sum at 0 (a product at 1); after the
  loop each accumulator is combined across the group (butterfly shuffles; for a block, shuffles then
  shared memory), so every lane holds the row's value and code after the loop sees what it saw
  before. A tuple updated together (an online softmax's (max, sum), a Welford (count, mean, M2)) is
  merged as a whole (``ptxf_softmax``/``ptxf_welford`` parts: the max's rescale, Chan's merge), the
  other lanes starting an empty part (a max at the lowest finite value, so a lane's first element
  -inf gives no NaN; a count taken from the loop index becomes a per-lane count); every merge gives
  the same bits in either order, so the butterfly leaves all lanes one value. Global stores in the
  loop must write distinct elements per iteration: each written buffer is accessed in the loop
  through one name and one index, affine in ``j`` (``p[r * N + j]``).
  A variable declared before the loop, set once by a statement of the body before any read of it
  and mentioned nowhere else, is a local of the loop's body (each lane its own).
  ``for (j = a; ...)`` over a ``j`` declared before (``int r = ..., j;``) is split too when no code reads ``j``
  after the loop (every other mention of it is in a loop that starts by assigning it).
- any other loop stays serial (why reaches the refusal when the pass then refuses). A ``for`` loop that carries nothing from one iteration to the next
  but its own variables (an outer loop over heads, say) runs on every lane with the same values,
  and its body is handled like the row's code: the loops inside it are split. Another loop runs on
  every lane when it writes no memory, or on the first lane only when it writes memory but no
  variable of the row's code.
- a statement outside the loops that writes memory (``mean[r] = m``, an ``atomicAdd``) runs on the
  first lane only.
- after a loop or a first-lane statement that writes a buffer read later, the group synchronises
  (``__syncwarp`` with the group's mask, ``__syncthreads`` for a block) so lanes see each other's
  writes.

Why every lane computes the same values outside the loops: each variable the row's code keeps is
either untouched by the loops or a combined accumulator, so conditions, early returns and serial
loops are uniform within a group; a group never diverges at a shuffle or barrier.

The launch follows: lanes per row ``L`` in {4, 8, 16, 32} in blocks of 256 threads (``256 / L``
rows per block), or one block of ``L`` in {128, 256, 512, 1024} threads per row; the grid is the
row count (the guard's bound, through the spec's scalar values) divided by rows per block, or the
original grid's threads when the bound is not a spec scalar; a 2-D/3-D grid keeps its dimensions past x (the
batches). The row index is computed in 64 bits.

Refused (the kernel is left alone): a block that is not 1-D or not a literal, a grid y/z not read as a batch index
(``T b = blockIdx.y;``, never written; a y index from ``threadIdx.y`` is a 2-D block), a guard part that reads memory,
calls or varies between threads,
``launch.policy = "fixed"``, shared memory, barriers, warp collectives, ``asm``, ``threadIdx``/
``blockIdx``/``blockDim``/``gridDim`` in the row's code, ``break``/``return``/``goto`` inside a
loop to split, a loop left serial on every lane that runs more than ``REPEATED_TRIPS`` iterations (or an unknown
number) at a bench size (each lane would repeat all of it), a carried variable that is not a recognised accumulation, a written buffer accessed
through two names or indices in one loop, a thread-local array written in a loop to split, a
memory-writing serial loop that also sets row variables, a grid over 2^31 - 1 blocks at a spec
size, a loop to split that walks a column (consecutive threads on consecutive elements, iterations a
stride apart: :mod:`.colpar`'s kernel, whose lanes would not coalesce), and a kernel with no loop to split.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ptxfactory.protocol import LaunchConfig
from ptxfactory.protocol.expr import ExprError, evaluate

from . import syntax as sx
from .affine import Poly, add, collapsed_nest, independent, poly, split
from .base import LOAD_FUNCS, STORE_FUNCS, Unit, access_kind
from .grid_stride import FACTS_NOTE, threads_per_sm
from .syntax import COLLECTIVES
from .opening import ElementGuard, _index_decl, element_guard
from .reductions import Accumulator, loop_accumulators
from .syntax import Node

BUILTINS = frozenset({"threadIdx", "blockIdx", "blockDim", "gridDim"})
GROUP_BLOCK = 256  # threads per block when a row gets a sub-warp or a warp
MAX_GRID = 2**31 - 1
LANE = "ptxf_lane"
SHUFFLE_TYPES = frozenset({"float", "double", "int", "unsigned", "unsigned int", "long long", "unsigned long long",
                           "long", "unsigned long", "int32_t", "uint32_t", "int64_t", "uint64_t", "size_t"})

HELPERS = {
    "ptxf_group_mask": """\
template <int L>
static __device__ __forceinline__ unsigned ptxf_group_mask()
{   // the lanes of this thread's group of L (L a power of two up to 32) within its warp
    return L >= 32 ? 0xffffffffu : (((1u << L) - 1u) << (threadIdx.x & 31u & ~(unsigned)(L - 1)));
}""",
    "ptxf_group_reduce": """\
template <int L, typename T, typename F>
static __device__ __forceinline__ T ptxf_group_reduce(T v, F op)
{   // butterfly over the group's L lanes: every lane ends with op over all of them
    const unsigned m = ptxf_group_mask<L < 32 ? L : 32>();
#pragma unroll
    for (int o = (L < 32 ? L : 32) / 2; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(m, v, o));
    return v;
}""",
    "ptxf_block_reduce": """\
template <typename T, typename F>
static __device__ __forceinline__ T ptxf_block_reduce(T v, F op)
{   // every thread of the block ends with op over all threads (warps first, then the warps' results in order)
    __shared__ T part[32];
    v = ptxf_group_reduce<32>(v, op);
    __syncthreads();
    if ((threadIdx.x & 31u) == 0u) part[threadIdx.x >> 5] = v;
    __syncthreads();
    v = part[0];
    for (unsigned w = 1; w < (blockDim.x + 31u) >> 5; ++w) v = op(v, part[w]);
    return v;
}""",
    "ptxf_group_reduce_arg": """\
template <int L, typename T, typename K, typename B>
static __device__ __forceinline__ void ptxf_group_reduce_arg(T& v, K& k, B better)
{   // (value, index) pairs over the group's L lanes; better(v2, k2, v, k): (v2, k2) replaces (v, k)
    const unsigned m = ptxf_group_mask<L < 32 ? L : 32>();
#pragma unroll
    for (int o = (L < 32 ? L : 32) / 2; o > 0; o >>= 1) {
        const T v2 = __shfl_xor_sync(m, v, o);
        const K k2 = __shfl_xor_sync(m, k, o);
        if (better(v2, k2, v, k)) { v = v2; k = k2; }
    }
}""",
    "ptxf_block_reduce_arg": """\
template <typename T, typename K, typename B>
static __device__ __forceinline__ void ptxf_block_reduce_arg(T& v, K& k, B better)
{   // the block-wide ptxf_group_reduce_arg: warps first, then the warps' pairs in order
    __shared__ T pv[32];
    __shared__ K pk[32];
    ptxf_group_reduce_arg<32>(v, k, better);
    __syncthreads();
    if ((threadIdx.x & 31u) == 0u) { pv[threadIdx.x >> 5] = v; pk[threadIdx.x >> 5] = k; }
    __syncthreads();
    v = pv[0];
    k = pk[0];
    for (unsigned w = 1; w < (blockDim.x + 31u) >> 5; ++w)
        if (better(pv[w], pk[w], v, k)) { v = pv[w]; k = pk[w]; }
}""",
}


HELPERS.update({
    "ptxf_row_mask": """\
static __device__ __forceinline__ unsigned ptxf_row_mask()
{   // the lanes of this thread's row (threadIdx.x, blockDim.x of them: a power of two up to 32) within its warp
    const unsigned L = blockDim.x;
    if (L >= 32u) return 0xffffffffu;
    const unsigned t = (threadIdx.y * L + threadIdx.x) & 31u;
    return ((1u << L) - 1u) << (t & ~(L - 1u));
}""",
    "ptxf_row_sync": """\
static __device__ __forceinline__ void ptxf_row_sync()
{   // the row's lanes see each other's writes: a warp's group, or the whole block when a row has more than a warp
    if (blockDim.x > 32u) __syncthreads(); else __syncwarp(ptxf_row_mask());
}""",
    "ptxf_row_reduce": """\
template <typename T, typename F>
static __device__ __forceinline__ T ptxf_row_reduce(T v, F op)
{   // op over the row's blockDim.x lanes (a group within a warp, or the block when blockDim.y == 1); every lane gets it
    if (blockDim.x > 32u) return ptxf_block_reduce(v, op);
    const unsigned m = ptxf_row_mask();
    for (unsigned o = blockDim.x >> 1; o > 0u; o >>= 1) v = op(v, __shfl_xor_sync(m, v, o));
    return v;
}""",
    "ptxf_row_reduce_arg": """\
template <typename T, typename K, typename B>
static __device__ __forceinline__ void ptxf_row_reduce_arg(T& v, K& k, B better)
{   // (value, index) pairs over the row's lanes; better(v2, k2, v, k): (v2, k2) replaces (v, k)
    if (blockDim.x > 32u) { ptxf_block_reduce_arg(v, k, better); return; }
    const unsigned m = ptxf_row_mask();
    for (unsigned o = blockDim.x >> 1; o > 0u; o >>= 1) {
        const T v2 = __shfl_xor_sync(m, v, o);
        const K k2 = __shfl_xor_sync(m, k, o);
        if (better(v2, k2, v, k)) { v = v2; k = k2; }
    }
}""",
})
# what each helper needs defined before it
HELPER_NEEDS = {
    "ptxf_group_reduce": ("ptxf_group_mask",), "ptxf_group_reduce_arg": ("ptxf_group_mask",),
    "ptxf_block_reduce": ("ptxf_group_reduce",), "ptxf_block_reduce_arg": ("ptxf_group_reduce_arg",),
    "ptxf_row_sync": ("ptxf_row_mask",), "ptxf_row_reduce": ("ptxf_row_mask", "ptxf_block_reduce"),
    "ptxf_row_reduce_arg": ("ptxf_row_mask", "ptxf_block_reduce_arg"),
}
# Tuple accumulators (online softmax, Welford: :mod:`.reductions`): each lane's part is a struct with ``shfl`` (the part
# of the lane o away) and ``merge`` (fold another part in). A merge gives the same bits in either order (products summed
# through __fmul_rn/__fadd_rn, which are never contracted into an FMA), so a butterfly leaves every lane the same value.
HELPERS.update({
    "ptxf_rn": """\
template <typename T>
static __device__ __forceinline__ T ptxf_mul_rn(T a, T b)
{   // a * b rounded to nearest, never contracted into an FMA
    if constexpr (sizeof(T) == 4) return __fmul_rn(a, b); else return __dmul_rn(a, b);
}
template <typename T>
static __device__ __forceinline__ T ptxf_add_rn(T a, T b)
{
    if constexpr (sizeof(T) == 4) return __fadd_rn(a, b); else return __dadd_rn(a, b);
}
template <typename T>
static __device__ __forceinline__ T ptxf_lowest()
{   // the lowest finite value of float or double
    if constexpr (sizeof(T) == 4) return -3.402823466e+38f; else return -1.7976931348623157e+308;
}""",
    "ptxf_softmax": """\
template <typename T, int FAST>
struct ptxf_softmax
{   // a part of a row's online softmax: s = the sum of exp(x - m) over its elements x, m their maximum (or its start)
    T m, s;
    __device__ __forceinline__ ptxf_softmax shfl(unsigned mask, int o) const
    {
        return {__shfl_xor_sync(mask, m, o), __shfl_xor_sync(mask, s, o)};
    }
    static __device__ __forceinline__ T ex(T x)
    {
        if constexpr (sizeof(T) == 4) return FAST ? __expf(x) : expf(x); else return exp(x);
    }
    __device__ __forceinline__ void merge(const ptxf_softmax& b)
    {   // a part without elements (s = 0, m = the lowest value or -inf) is scaled by exp(-inf) = 0 or by 1: no NaN
        const T mx = fmax(m, b.m);
        const T fa = m == mx ? T(1) : ex(m - mx), fb = b.m == mx ? T(1) : ex(b.m - mx);
        s = ptxf_add_rn(ptxf_mul_rn(s, fa), ptxf_mul_rn(b.s, fb));
        m = mx;
    }
    __device__ __forceinline__ T max_or(T start) const
    {   // the row's maximum; its start value when no element reached the lowest finite value (the other lanes' start)
        return s == T(0) && m == ptxf_lowest<T>() ? start : m;
    }
};""",
    "ptxf_welford": """\
template <typename C, typename T>
struct ptxf_welford
{   // a part of a Welford reduction: n elements, their mean, m2 = the sum of their squared deviations from it
    C n;
    T mean, m2;
    __device__ __forceinline__ ptxf_welford shfl(unsigned mask, int o) const
    {
        return {__shfl_xor_sync(mask, n, o), __shfl_xor_sync(mask, mean, o), __shfl_xor_sync(mask, m2, o)};
    }
    __device__ __forceinline__ void merge(const ptxf_welford& b)
    {   // Chan et al.'s pairwise merge, the mean as the weighted mean; a part without elements (0, 0, 0) adds nothing
        if (n == C(0) || b.n == C(0)) { n += b.n; mean += b.mean; m2 += b.m2; return; }
        const T na = T(n), nb = T(b.n), d = b.mean - mean, nt = T(n + b.n);
        mean = ptxf_add_rn(ptxf_mul_rn(na, mean), ptxf_mul_rn(nb, b.mean)) / nt;
        m2 = ptxf_add_rn(m2, b.m2) + ptxf_mul_rn(ptxf_mul_rn(d, d), ptxf_mul_rn(na, nb)) / nt;
        n += b.n;
    }
};""",
    "ptxf_group_merge": """\
template <int L, typename P>
static __device__ __forceinline__ void ptxf_group_merge(P& p)
{   // butterfly over the group's L lanes: every lane ends with all their parts merged
    const unsigned m = ptxf_group_mask<L < 32 ? L : 32>();
#pragma unroll
    for (int o = (L < 32 ? L : 32) / 2; o > 0; o >>= 1) p.merge(p.shfl(m, o));
}""",
    "ptxf_block_merge": """\
template <typename P>
static __device__ __forceinline__ void ptxf_block_merge(P& p)
{   // every thread of the block ends with all parts merged (warps first, then the warps' parts in order)
    __shared__ P part[32];
    ptxf_group_merge<32>(p);
    __syncthreads();
    if ((threadIdx.x & 31u) == 0u) part[threadIdx.x >> 5] = p;
    __syncthreads();
    p = part[0];
    for (unsigned w = 1; w < (blockDim.x + 31u) >> 5; ++w) p.merge(part[w]);
}""",
    "ptxf_row_merge": """\
template <typename P>
static __device__ __forceinline__ void ptxf_row_merge(P& p)
{   // the parts of the row's blockDim.x lanes merged (a group within a warp, or the block when blockDim.y == 1)
    if (blockDim.x > 32u) { ptxf_block_merge(p); return; }
    const unsigned m = ptxf_row_mask();
    for (unsigned o = blockDim.x >> 1; o > 0u; o >>= 1) p.merge(p.shfl(m, o));
}""",
})
HELPER_NEEDS.update({
    "ptxf_softmax": ("ptxf_rn",), "ptxf_welford": ("ptxf_rn",), "ptxf_group_merge": ("ptxf_group_mask",),
    "ptxf_block_merge": ("ptxf_group_merge",), "ptxf_row_merge": ("ptxf_row_mask", "ptxf_block_merge"),
})
TUPLE_PARTS = {"softmax": "ptxf_softmax", "welford": "ptxf_welford"}  # the part struct of each tuple kind
# The auto variant's lanes per row, chosen at launch from the row length n and the row count: the fewest of these
# tiers giving each lane at most ELEMENTS_PER_LANE elements of the row's loop, and (with the GPU's facts) at least
# one full-occupancy wave of threads over all rows. 32 elements a lane is the bound of the widely used persistent
# warp-per-row softmax (a warp for rows up to 1024 elements); measured on the H200 (xent_fwd, rows of 1000 logits),
# a warp per row ran at 75% of copy where the 16-element bound's block of 256 ran at 14%.
AUTO_TIERS = (8, 32, 256, 1024)
ELEMENTS_PER_LANE = 32
# The auto variants by that bound: ``auto`` as above, and ``auto_e128`` (128 elements a lane at most: fewer lanes a long
# row, more loads in flight a lane, a smaller combine). Neither bound wins everywhere: on the H200 (xent_fwd, 4096 rows
# of 32000 logits), the 32 bound's 1024 lanes a row ran at 43% of copy where a block of 256 (125 a lane) ran at 86%; on
# 131072 rows of 1000, the 32 bound's warp ran at 56% and a block of 256 at 19%. Both are candidates; the search and the
# lessons choose.
AUTO_BOUNDS = {"auto": ELEMENTS_PER_LANE, "auto_e128": 128}


def helper_closure(used: list[str]) -> list[tuple[str, str]]:
    """``(name, definition)`` of the helpers ``used`` and what they need, each after what it needs."""
    out: list[str] = []

    def add(n: str) -> None:
        if n in out:
            return
        for d in HELPER_NEEDS.get(n, ()):
            add(d)
        out.append(n)

    for n in used:
        add(n)
    return [(n, HELPERS[n]) for n in out]


class Refused(Exception):
    """The row's code does something the pass does not prove safe (the message says what)."""


class PlannedPass:
    """A pass whose ``_plan(unit)`` works out the whole rewrite or raises :class:`Refused` with the reason."""

    def _plan(self, unit: Unit):
        raise NotImplementedError

    def _reading(self, unit: Unit):
        """What :meth:`why_not` proves: the plan (a pass that may read the kernel another way first overrides it)."""
        return self._plan(unit)

    def why_not(self, unit: Unit) -> str | None:
        """Why the pass refuses ``unit`` (None when it applies)."""
        try:
            self._reading(unit)
        except Refused as e:
            return str(e)
        return None

    def applies(self, unit: Unit) -> bool:
        return self.why_not(unit) is None


@dataclass
class _Rewrite:
    """What the walk over the row's code collected: byte edits, helpers used, loops split."""

    edits: list[tuple[int, int, bytes]] = field(default_factory=list)
    helpers: list[str] = field(default_factory=list)
    split: int = 0
    length: str | None = None  # the first split loop's trip count as a spec expression (None: not one)
    kept_serial: list[str] = field(default_factory=list)  # loops not split, and why
    every_lane: list[Node] = field(default_factory=list)  # serial loops every lane runs whole (no memory written)
    loops: list[tuple[Node, str]] = field(default_factory=list)  # the loops split, with their variables


class RowParallelPass(PlannedPass):
    """One thread per row -> ``lanes`` threads per row (``lanes`` <= 32: a sub-warp or warp, 256-thread blocks;
    above 32: one block of ``lanes`` threads per row). See the module docstring."""

    group = "grid"  # an alternative to vectorize and grid_stride: all three redefine what a thread does
    exact = False  # sums are re-associated (max, min and arg reductions are exact)

    def __init__(self, lanes: int | str):
        if lanes not in (4, 8, 16, 32, 128, 256, 512, 1024, *AUTO_BOUNDS):
            raise ValueError(f"rowpar: lanes per row must be 4, 8, 16, 32, 128, 256, 512, 1024 or one of "
                             f"{', '.join(map(repr, AUTO_BOUNDS))}, not {lanes!r}")
        self.lanes = lanes
        self.auto = lanes in AUTO_BOUNDS
        self.block = not self.auto and lanes > 32
        self.name = f"rowpar_{lanes}" if self.auto else f"rowpar_block{lanes}" if self.block else f"rowpar_lanes{lanes}"
        self.step = "blockDim.x" if self.auto else str(lanes)
        # what covering_order proposes early, one chain each: lanes chosen at launch, a group within a warp, a block
        self.kind = (RowParallelPass, "auto" if self.auto else "block" if self.block else "group")

    # -- precondition -------------------------------------------------------------------------------------

    def _plan(self, unit: Unit) -> tuple[ElementGuard, _Rewrite, LaunchConfig]:
        if unit.body is None:
            raise Refused("no kernel body")
        threads = unit.block_threads()
        why: list[str] = []
        g = _row_guard(unit, batch=True, why=why) or _row_loop(unit)
        if g is None or threads is None:
            raise Refused("not one thread per row (index = blockIdx.x * blockDim.x + threadIdx.x, then a guard) "
                          "with a literal 1-D block and launch.policy = \"free\"" + "".join(f": {w}" for w in why[:1]))
        if sx.type_text(g.type_node) not in sx.INT_TYPES:
            raise Refused(f"row index type {sx.type_text(g.type_node)!r} is not an integer type")
        for stmt in g.rest:
            _check_whole(stmt)
        if sx.written_names(_span_nodes(g.rest)) & ({g.name} | sx.identifiers(g.bound)):
            raise Refused("the row index or the row count is written in the row's code")
        unit_arrays = _local_arrays(unit.body)
        roots = pointer_roots(unit)
        rw = _Rewrite()
        ctx = _Walk(unit, self, roots, unit_arrays, rw, g.rest)
        ctx.statements(g.rest)
        if rw.split == 0:
            raise Refused("no loop to split across lanes" + (f" ({'; '.join(rw.kept_serial)})" if rw.kept_serial else ""))
        self._check_layout(ctx, g, rw)
        self._check_gain(unit, ctx, g, rw)
        self._check_length(unit, rw)
        self._check_repeated(unit, rw)
        self._check_starved(unit, rw)
        launch = self._launch(unit, g, threads, rw)
        return g, rw, launch

    def _check_length(self, unit: Unit, rw: "_Rewrite") -> None:
        """Refuses a split whose loop runs fewer iterations than the fewest lanes a row gets, at every bench size (a K
        x K pooling window's loop of 2 or 3: most lanes would idle), or a short loop (at most :data:`SHORT_SPLIT`
        iterations) fewer than two a lane (a dilated window's 4 taps over 4 lanes: a load a lane, then the combine, for
        a row whose loads were already few). A long row over many lanes, one element each, is kept (few rows)."""
        if rw.length is None or not unit.spec.bench.sizes:
            return
        lanes = AUTO_TIERS[0] if self.auto else self.lanes
        try:
            longest = max(int(evaluate(rw.length, size)) for size in unit.spec.bench.sizes)
        except ExprError:
            return
        if longest < lanes:
            raise Refused(f"the split loop runs {longest} iterations at most at the bench sizes, fewer than the {lanes} "
                          f"lanes a row would get: most lanes would idle")
        if longest < 2 * lanes and longest <= SHORT_SPLIT:
            raise Refused(f"the split loop runs {longest} iterations at most at the bench sizes, fewer than two for each "
                          f"of the {lanes} lanes a row would get: a load a lane, then the combine")

    def _check_repeated(self, unit: Unit, rw: "_Rewrite") -> None:
        """Refuses a split that leaves a long loop serial on every lane: each of a row's lanes would run all of it,
        the row's work on that loop multiplied by its lanes (a naive attention's second pass over the keys, kept
        serial for its thread-local accumulator array, 1024 times over with a block a row). A loop of at most
        :data:`REPEATED_TRIPS` iterations at every bench size (a pooling window, a head's 64 channels) is cheap to
        repeat; one whose trip count cannot be read is not assumed to be."""
        for loop in rw.every_lane:
            trips = loop_trips(unit, loop)
            if trips is None or trips > REPEATED_TRIPS:
                kept = [w.split(": ", 1)[1] for w in rw.kept_serial if w.startswith(f"line {loop.start_point[0] + 1}: ")]
                count = f"{trips} iterations at a bench size" if trips is not None else "a trip count the pass cannot read"
                raise Refused(f"the loop at line {loop.start_point[0] + 1} stays serial"
                              + (f" ({kept[0]})" if kept else "")
                              + f" and every lane of a row would run all of it ({count}): the split would multiply its work")

    def _check_starved(self, unit: Unit, rw: "_Rewrite") -> None:
        """Refuses a split loop of fewer iterations than the row's lanes at every bench size whose body holds a serial
        loop of more than :data:`REPEATED_TRIPS` iterations: a few lanes would each run that long loop alone while
        the rest idle (a GroupNorm's loop over a group's 8 channels around the 16384 pixels of each; ``collapse``
        makes the nest one loop, which the lanes then share)."""
        if not isinstance(self.lanes, int) or not unit.spec.bench.sizes:
            return
        for loop, j in rw.loops:
            trips = split_trips(unit, loop, j)
            if trips is None or trips >= self.lanes:
                continue
            body = loop.child_by_field_name("body")
            inner = [n for n in sx.walk(body) if n.type in sx.LOOPS] if body is not None else []
            long = [n for n in inner if (t := loop_trips(unit, n)) is None or t > REPEATED_TRIPS]
            if long:
                raise Refused(f"the loop at line {loop.start_point[0] + 1} gives {trips} of the {self.lanes} lanes work, "
                              f"each running the loop at line {long[0].start_point[0] + 1} alone (collapse's case)")

    def _check_layout(self, walk: "_Walk", g: ElementGuard, rw: "_Rewrite") -> None:
        """Refuses a split loop that walks a column (:meth:`_Walk.strides_columns`): its lanes would read elements a
        stride apart where the original's threads read consecutive ones (``colpar``'s case)."""
        for loop, j in rw.loops:
            if walk.strides_columns(loop, j, g.name):
                raise Refused(f"the loop at line {loop.start_point[0] + 1} strides along {j} while consecutive threads read "
                              f"consecutive elements (a column reduction: colpar's case); split, its lanes would not coalesce")

    def _check_gain(self, unit: Unit, walk: "_Walk", g: ElementGuard, rw: "_Rewrite") -> None:
        """With the GPU's facts, refuses a split that gains neither parallelism nor coalescing: the rows fill a wave of
        the GPU at every bench size and no access in a split loop moves one element an iteration (a transposed
        convolution's channel loop, its lanes reading H * W apart: more threads, the same scattered loads, and a
        combine a row). An access that is no polynomial of the loop's index keeps the split (it cannot be read)."""
        facts = unit.notes.get(FACTS_NOTE)
        rows = rows_expression(unit, g.bound) or f"({unit.launch.grid[0]}) * {unit.block_threads()}"  # (one row a thread)
        if facts is None or not unit.spec.bench.sizes or unit.block_threads() is None:
            return
        wave = facts.sm_count * threads_per_sm(facts.arch)
        try:
            if min(int(evaluate(rows, size)) for size in unit.spec.bench.sizes) < wave:
                return
        except ExprError:
            return
        subst = row_constants(unit.body)
        for loop, j in rw.loops:
            body = loop.child_by_field_name("body")
            strides = []
            for _, f in walk.buffer_accesses(body, subst):
                parts = None if f is None else split(f, j)
                if parts is None:
                    return  # (an index it cannot read: no judgement)
                if parts[0]:
                    strides.append(parts[0])
            if not strides or any(a == {(): 1} for a in strides):
                return
        raise Refused(f"the rows fill the GPU ({rows} at least {wave} at every bench size) and no access in the split "
                      "loop moves one element an iteration: its lanes would add threads, not coalesced loads")

    def _launch(self, unit: Unit, g: ElementGuard, threads: int, rw: "_Rewrite") -> LaunchConfig:
        rows = rows_expression(unit, g.bound)
        if rows is None:
            rows = f"({unit.launch.grid[0]}) * {threads}"  # the original grid's threads: one row each
        if self.auto:
            block, grid = self._auto_shape(unit, rows, rw)
        else:
            block = [self.lanes if self.block else GROUP_BLOCK]
            per_block = 1 if self.block else GROUP_BLOCK // self.lanes
            grid = rows if per_block == 1 else f"cdiv({rows}, {per_block})"
        for size in unit.spec.check.sizes + unit.spec.bench.sizes:
            try:
                if not 0 < int(evaluate(grid, size)) <= MAX_GRID:
                    raise Refused(f"grid {grid} out of range at {size}")
                dims = [int(evaluate(b, size)) for b in block]
                if any(d < 1 for d in dims) or dims[0] * (dims[1] if len(dims) > 1 else 1) > 1024:
                    raise Refused(f"block {block} out of range at {size}")
            except ExprError as e:
                raise Refused(f"launch {grid} / {block} cannot be evaluated at {size}: {e}") from None
        return LaunchConfig(grid=[grid, *unit.launch.grid[1:]], block=block, shared_mem=unit.launch.shared_mem)

    def _auto_shape(self, unit: Unit, rows: str, rw: "_Rewrite") -> tuple[list[str], str]:
        if rw.length is None:
            raise Refused("the split loop's length is not an expression of the spec's sizes (lanes cannot follow it)")
        return auto_shape(unit, rows, rw.length, batch_count(unit), AUTO_BOUNDS[self.lanes])

    # -- rewrite ------------------------------------------------------------------------------------------

    def row_index(self, ctype: str) -> tuple[str, str, str]:
        """``(index, lane, how)``: the row index's new value (of type ``ctype``), the declaration of :data:`LANE` (the
        thread's lane within its row, 0 the row's first), and the comment saying how rows map to threads."""
        if self.auto:
            return (f"({ctype})((unsigned long long)blockIdx.x * blockDim.y + threadIdx.y)",
                    f"const unsigned {LANE} = threadIdx.x;", "blockDim.x lanes per row, chosen at launch from the row length")
        if self.block:
            return f"({ctype})blockIdx.x", f"const unsigned {LANE} = threadIdx.x;", f"one block of {self.lanes} threads per row"
        return (f"({ctype})(((unsigned long long)blockIdx.x * blockDim.x + threadIdx.x) / {self.lanes}u)",
                f"const unsigned {LANE} = threadIdx.x % {self.lanes}u;", f"{self.lanes} lanes per row")

    def row_stride(self, ctype: str) -> str:
        """The rows between a group's two rows in a grid-stride loop over rows (:class:`RowLoop`)."""
        if self.auto:
            return f"({ctype})((unsigned long long)gridDim.x * blockDim.y)"
        if self.block:
            return f"({ctype})gridDim.x"
        return f"({ctype})((unsigned long long)gridDim.x * blockDim.x / {self.lanes}u)"

    def extra_edits(self, unit: Unit) -> list[tuple[int, int, bytes]]:
        """Edits outside the row's code (a subclass's kernel attribute); none here."""
        return []

    def apply(self, unit: Unit) -> Unit:
        g, rw, launch = self._plan(unit)
        data = unit.data
        ctype = sx.type_text(g.type_node)
        index, lane, how = self.row_index(ctype)
        if isinstance(g, RowLoop):  # for (row = ...; row < n; row += blockDim.x * gridDim.x): groups stride over rows
            indent, _ = sx.line_indent(data, g.loop.start_byte)
            edits = [(g.loop.start_byte, g.loop.start_byte, f"{lane}  // {how} (transform rowpar)\n{indent.decode()}".encode()),
                     (g.init.start_byte, g.init.end_byte, index.encode()),
                     (g.update.start_byte, g.update.end_byte, f"{g.name} += {self.row_stride(ctype)}".encode())] + rw.edits
        else:
            edits = [index_edit(unit, g, index, f"{how} (transform rowpar)", lane)] + rw.edits
        helpers = helper_closure(rw.helpers)
        return unit.with_text(sx.apply_edits(data, edits + self.extra_edits(unit)), launch=launch, helpers=helpers,
                              lanes=self.lanes)

    # -- what the rewrite writes ----------------------------------------------------------------------------

    def combine(self, acc: Accumulator, ctype: str, index_type: str | None) -> str:
        """The statement combining ``acc``'s partial results across the group (every lane gets the row's value)."""
        if acc.kind == "arg":
            op = ">" if acc.direction == "max" else "<"
            tie = "<" if acc.first else ">"
            better = (f"[](const {ctype}& ptxf_v2, const {index_type}& ptxf_k2, const {ctype}& ptxf_v1, const {index_type}& ptxf_k1) "
                      f"{{ return ptxf_v2 {op} ptxf_v1 || (ptxf_v2 == ptxf_v1 && ptxf_k2 {tie} ptxf_k1); }}")
            fn = self._fn("ptxf_row_reduce_arg", "ptxf_block_reduce_arg", f"ptxf_group_reduce_arg<{self.lanes}>")
            return f"{fn}({acc.name}, {acc.index}, {better});"
        # (the lambda's parameters are ptxf_ names: a kernel's buffers named a and b stay visible to the other passes)
        expr = acc.combine.format(a="ptxf_a", b="ptxf_b")
        op = f"[](const {ctype}& ptxf_a, const {ctype}& ptxf_b) {{ return ({ctype})({expr}); }}"
        fn = self._fn("ptxf_row_reduce", "ptxf_block_reduce", f"ptxf_group_reduce<{self.lanes}>")
        return f"{acc.name} = {fn}({acc.name}, {op});"

    def _fn(self, auto: str, block: str, group: str) -> str:
        return auto if self.auto else block if self.block else group

    def sync(self) -> str:
        return self._fn("ptxf_row_sync();", "__syncthreads();", f"__syncwarp(ptxf_group_mask<{self.lanes}>());")

    def sync_helper(self) -> str:
        return self._fn("ptxf_row_sync", "ptxf_group_mask", "ptxf_group_mask")

    def helpers_for(self, acc: Accumulator) -> list[str]:
        if acc.kind in TUPLE_PARTS:
            return [TUPLE_PARTS[acc.kind], self._fn("ptxf_row_merge", "ptxf_block_merge", "ptxf_group_merge")]
        if acc.kind == "arg":
            return [self._fn("ptxf_row_reduce_arg", "ptxf_block_reduce_arg", "ptxf_group_reduce_arg")]
        return [self._fn("ptxf_row_reduce", "ptxf_block_reduce", "ptxf_group_reduce")]

    # -- tuples (online softmax, Welford) ---------------------------------------------------------------------

    def merges_tuples(self) -> bool:
        """Whether this pass merges tuple accumulators after a split loop: rowpar's helpers do; a subclass that names
        its combine helpers otherwise (its own ``_fn``) has no tuple merge unless it says so by overriding this."""
        return type(self)._fn is RowParallelPass._fn

    @staticmethod
    def tuple_types(acc: Accumulator, types: dict[str, str | None]) -> tuple[str, str | None] | str:
        """``(value type, count type)`` of a tuple accumulator (the count's type None for a softmax, ``unsigned`` for a
        count taken from the loop index), or why its declared types do not fit (float or double values, alike)."""
        m = acc.members
        values = [m["max"], m["sum"]] if acc.kind == "softmax" else [m["mean"], m["m2"]]
        kinds = {types.get(v) for v in values}
        if len(kinds) != 1 or not kinds <= {"float", "double"}:
            return f"{', '.join(values)}: not all float or all double"
        count = None if acc.kind == "softmax" else types.get(m["count"]) if m["count"] else "unsigned"
        if acc.kind == "welford" and count not in SHUFFLE_TYPES:
            return f"{m['count']}'s type cannot be shuffled"
        return kinds.pop(), count

    @staticmethod
    def tuple_start(acc: Accumulator, value: str, tag: int) -> list[str]:
        """The statements before the split loop: every lane but the first starts an empty part (a softmax's max at the
        lowest finite value, not -inf: its own first element -inf then gives exp(-inf) = 0, not exp(-inf - -inf))."""
        m = acc.members
        if acc.kind == "softmax":
            return [f"const {value} ptxf_start{tag} = {m['max']};  // the max's first value (transform rowpar)",
                    f"if ({LANE} != 0u) {{ {m['max']} = ptxf_lowest<{value}>(); {m['sum']} = 0; }}  "
                    "// each lane its own (max, sum of exp) (transform rowpar)"]
        zero = f"{m['mean']} = 0; {m['m2']} = 0;"
        if m["count"]:
            return [f"if ({LANE} != 0u) {{ {m['count']} = 0; {zero} }}  // each lane its own (count, mean, M2) (transform rowpar)"]
        first = f"{LANE} == 0u ? {acc.count_start}u : 0u" if acc.count_start else "0u"  # the count before the loop's start
        return [f"unsigned ptxf_count{tag} = {first};  // this lane's count (transform rowpar)",
                f"if ({LANE} != 0u) {{ {zero} }}  // each lane its own (mean, M2) (transform rowpar)"]

    def tuple_combine(self, acc: Accumulator, value: str, count: str | None, tag: int) -> str:
        """The statement merging a tuple's parts across the group (every lane gets the row's values)."""
        m = acc.members
        if acc.kind == "softmax":
            part = f"ptxf_softmax<{value}, {int(acc.exp == '__expf')}>"
            fields = [("m", m["max"]), ("s", m["sum"])]
            finish = f"{m['max']} = ptxf_part.max_or(ptxf_start{tag}); {m['sum']} = ptxf_part.s;"
        else:
            part = f"ptxf_welford<{count}, {value}>"
            fields = [("n", m["count"] or f"ptxf_count{tag}"), ("mean", m["mean"]), ("m2", m["m2"])]
            finish = " ".join(f"{v} = ptxf_part.{f};" for f, v in fields)
        fn = self._fn("ptxf_row_merge", "ptxf_block_merge", f"ptxf_group_merge<{self.lanes}>")
        return (f"{{ {part} ptxf_part = {{{', '.join(v for _, v in fields)}}}; {fn}(ptxf_part); {finish} }}  "
                "/* the lanes' parts merged (transform rowpar) */")


class _Walk:
    """The walk over the row's code: decides each statement's fate and records the edits."""

    def __init__(self, unit: Unit, p: RowParallelPass, roots: dict[str, str], arrays: set[str], rw: _Rewrite,
                 rest: list[Node]):
        self.unit, self.p, self.roots, self.arrays, self.rw = unit, p, roots, arrays, rw
        self.data = unit.data
        self.end = rest[-1].end_byte if rest else 0
        self.declared = sx.declaration_counts(unit.fn)  # every name the kernel declares, with how often
        self.offsets = pointer_offsets(unit, roots)

    def statements(self, stmts: list[Node]) -> None:
        for s in stmts:
            self.statement(s)

    def statement(self, s: Node) -> None:
        t = s.type
        if t == "compound_statement":
            self.statements(sx.statements(s))
        elif t == "if_statement":
            for f in ("consequence", "alternative"):
                c = s.child_by_field_name(f)
                if c is not None:
                    c = c.named_children[-1] if c.type == "else_clause" else c
                    self.statement(c)
        elif t == "for_statement":
            if not self.split(s):
                self.serial(s)
        elif t in sx.LOOPS:
            self.serial(s)
        elif self.writes_memory(s):
            if t == "declaration":
                raise Refused(f"a declaration that writes memory: {sx.text(s)!r}")
            self.first_lane(s)

    # loops -------------------------------------------------------------------------------------------------

    def split(self, loop: Node) -> bool:
        """Split ``loop`` across lanes when it is safe; False when it is not a loop to split (the reason is kept in
        ``self.rw.kept_serial`` for the refusal message when no loop at all is split)."""
        head = loop_head(loop)
        outer = set()  # the loop variable when declared before the loop (for (j = a; ...))
        if head is None:
            head = self.assigned_head(loop)
            if head is None:
                return self._serial(loop, "not for (T j = a; j < b; j++) (or for (j = a; ...) with j dead after the loop)")
            outer = {head[0]}
        j, start = head
        body = loop.child_by_field_name("body")
        bound_node = sx.unparen(loop.child_by_field_name("condition"))
        if sx.contains_type(body, ("break_statement", "return_statement", "goto_statement", "labeled_statement")):
            return self._serial(loop, "break, return or goto in the body")
        written = sx.written_names(body)
        if j in written or (sx.identifiers(bound_node) & written):
            return self._serial(loop, "the loop variable or the bound is written in the body")
        trip = sx.literal_trips(loop, self.unit.notes.get("constants"))
        lanes = self.p.lanes if isinstance(self.p.lanes, int) else None
        if trip is not None and (trip <= 1 or (lanes is not None and trip < lanes)):
            # (a 7-tap filter split over 32 lanes leaves 25 idle and adds a combine per output)
            return self._serial(loop, f"{trip} iteration(s), fewer than the {lanes or 2} lanes to split them over")
        carried = (written - sx.declared_names(body)) - {j}
        if (sx.declared_names(body) | {j}) - outer & _visible_at(loop, self.unit):
            return self._serial(loop, "a name of the loop shadows one declared around it")
        if any(n not in self.declared for n in carried):
            return self._serial(loop, "a global variable is written in the loop")
        why: list[str] = []
        dead = carried - _mentioned_outside(self.unit, loop, carried)  # scratch variables declared before the loop
        accs = loop_accumulators(body, carried, j, tuples=self.p.merges_tuples(), start=start, why=why, dead_after=dead)
        if accs is None:
            return self._serial(loop, f"carried {', '.join(sorted(carried))}: not recognised accumulations "
                                      "(sum, product, max, min, arg max/min, each updated alone; online softmax, "
                                      "Welford)" + "".join(f"; {w}" for w in why))
        trip = _trip(start, bound_node, j)
        if not self.stores_distinct(body, j, trip, loop):
            return self._serial(loop, "two iterations may touch one element of a buffer it writes")
        types = self.unit.types.scalar
        exact_only = self.unit.spec.check.rtol == 0 and self.unit.spec.check.atol == 0
        tag = self.rw.split
        tuples: dict[str, tuple[str, str | None]] = {}  # a tuple's name -> (value type, count type)
        for a in accs.values():
            if a.kind in TUPLE_PARTS:
                t = self.p.tuple_types(a, types)
                if isinstance(t, str):
                    return self._serial(loop, t)
                if exact_only:
                    return self._serial(loop, f"{', '.join(a.names)}: a {a.kind} merge re-associates, and the spec asks "
                                              "for exact results")
                if a.counts and body.type != "compound_statement":
                    return self._serial(loop, "a count from the loop index in a body that is not a block")
                tuples[a.name] = t
                continue
            if types.get(a.name) not in SHUFFLE_TYPES or (a.kind == "arg" and types.get(a.index) not in SHUFFLE_TYPES):
                return self._serial(loop, f"{a.name}'s type cannot be shuffled")
            if exact_only and a.kind in ("sum", "prod") and types.get(a.name) in ("float", "double"):
                return self._serial(loop, f"{a.name}: a floating-point sum, and the spec asks for exact results")
        # the rewrite: lanes' starting values, the strided header, the combines after the loop
        indent, _ = sx.line_indent(self.data, loop.start_byte)
        ind = indent.decode()
        before = "".join(f"if ({LANE} != 0u) {a.name} = {a.identity};  // each lane adds its share (transform rowpar)\n{ind}"
                         for a in accs.values() if a.identity is not None)
        for a in accs.values():
            if a.name in tuples:
                before += "".join(f"{x}\n{ind}" for x in self.p.tuple_start(a, tuples[a.name][0], tag))
            if a.counts:  # this lane's count, where the loop read its index
                self.rw.edits.append((body.start_byte + 1, body.start_byte + 1, f" ++ptxf_count{tag};".encode()))
                self.rw.edits += [(c.start_byte, c.end_byte, f"(ptxf_count{tag})".encode()) for c in a.counts]
        self.rw.edits.append((start.start_byte, start.end_byte, f"({sx.text(start)}) + {LANE}".encode()))
        update = loop.child_by_field_name("update")
        self.rw.edits.append((update.start_byte, update.end_byte, f"{j} += {self.p.step}".encode()))
        if self.rw.length is None:
            self.rw.length = spec_expression(self.unit, bound_node.child_by_field_name(
                "right" if sx.operator(bound_node) in ("<", "<=") else "left"), start)
        after = []
        for a in accs.values():
            if a.name in tuples:
                after.append(self.p.tuple_combine(a, *tuples[a.name], tag))
            else:
                after.append(self.p.combine(a, types[a.name], types.get(a.index) if a.index else None))
            self.rw.helpers += self.p.helpers_for(a)
        if self.written_roots(body) and self.read_later(loop, self.written_roots(body)):
            after.append(self.p.sync())
            self.rw.helpers.append(self.p.sync_helper())
        # a loop that is the whole body of an if, else or loop (no braces) takes what is added around it into a block
        braced = (before or after) and loop.parent is not None and loop.parent.type not in ("compound_statement", "translation_unit")
        if before or braced:
            self.rw.edits.append((loop.start_byte, loop.start_byte, (("{ " if braced else "") + before).encode()))
        if after or braced:
            self.rw.edits.append((loop.end_byte, loop.end_byte, ("".join(f"\n{ind}{x}" for x in after) + (" }" if braced else "")).encode()))
        self.rw.split += 1
        self.rw.loops.append((loop, j))
        return True

    def assigned_head(self, loop: Node) -> tuple[str, Node] | None:
        """``(j, a)`` for ``for (j = a; j < b; j++)`` over an integer ``j`` the kernel declares once, whose every mention
        outside this loop (but its declaration) is inside a ``for`` loop that starts by assigning it: its value after
        the loop (each lane's own once split) is never read."""
        init = loop.child_by_field_name("initializer")
        a = sx.unparen(init)
        if a is None or a.type != "assignment_expression" or sx.operator(a) != "=":
            return None
        j = sx.text(sx.unparen(a.child_by_field_name("left")))
        if not sx.is_ident(sx.unparen(a.child_by_field_name("left"))) or self.declared.get(j) != 1 \
                or self.unit.types.scalar.get(j) not in sx.INT_TYPES:
            return None
        probe = self.unit.data[:init.start_byte] + f"int {j} = ".encode() + self.unit.data[a.child_by_field_name("right").start_byte:]
        fake = sx.kernel_function(sx.parse(probe).root_node)
        node = next((n for n in sx.walk(fake) if n.type == "for_statement" and n.start_byte == loop.start_byte), None) if fake else None
        head = loop_head(node) if node is not None else None
        if head is None:
            return None
        return (j, a.child_by_field_name("right")) if value_dead_after(self.unit.fn, loop, j) else None

    def _serial(self, loop: Node, why: str) -> bool:
        self.rw.kept_serial.append(f"line {loop.start_point[0] + 1}: {why}")
        return False

    def serial(self, loop: Node) -> None:
        """A loop that stays serial. One that carries nothing (a ``for`` whose variables are all its own) runs on
        every lane with the same values, so its body is handled like the row's code (inner loops split, stores
        by one lane); else every lane runs it when it writes no memory, or the first lane alone."""
        carries = sx.written_names(loop) - sx.declared_names(loop)
        body = loop.child_by_field_name("body")
        header = [loop.child_by_field_name(f) for f in ("initializer", "condition", "update")]
        names = set().union(*(sx.identifiers(h) for h in header if h is not None))
        written = {n for n, r in self.roots.items() if r in self.written_roots(loop)} | self.written_roots(loop)
        if not carries and loop.type == "for_statement" and body is not None and not (names & written) and not sx.contains_type(
                body, ("break_statement", "continue_statement", "return_statement")):
            self.statement(body)
            return
        if not self.writes_memory(loop):
            self.rw.every_lane.append(loop)
            return
        if carries:
            line = loop.start_point[0] + 1
            kept = [w.split(": ", 1)[1] for w in self.rw.kept_serial if w.startswith(f"line {line}: ")]
            raise Refused(f"a serial loop writes memory and row variables (line {line}"
                          + (f"; kept serial: {'; '.join(kept)}" if kept else "") + ")")
        self.first_lane(loop)

    def first_lane(self, s: Node) -> None:
        indent, _ = sx.line_indent(self.data, s.start_byte)
        self.rw.edits.append((s.start_byte, s.start_byte, f"if ({LANE} == 0u) {{  // one lane writes (transform rowpar)\n{indent.decode()}    ".encode()))
        tail = f"\n{indent.decode()}}}"
        roots = self.written_roots(s)
        if roots and self.read_later(s, roots):
            tail += f"\n{indent.decode()}{self.p.sync()}"
            self.rw.helpers.append(self.p.sync_helper())
        self.rw.edits.append((s.end_byte, s.end_byte, tail.encode()))

    # memory --------------------------------------------------------------------------------------------------

    def writes_memory(self, node: Node) -> bool:
        """``node`` writes a buffer, calls an atomic or a store intrinsic, or writes a variable the kernel does not declare."""
        return bool(self.written_roots(node)) or any(n not in self.declared for n in sx.written_names(node))

    def written_roots(self, node: Node) -> set[str]:
        """Buffers (pointer parameters, through local pointers) written under ``node``; thread-local arrays excluded."""
        return written_roots(node, self.roots, self.arrays)

    def stores_distinct(self, body: Node, j: str, trip: Poly | None, loop: Node | None = None) -> bool:
        """No two iterations of the loop over ``j`` (``trip`` values) touch one element of a buffer the body writes
        (:func:`.affine.independent` on every pair of a write and an access, indices read through the local
        pointers' offsets; for a nest that :mod:`.collapse` made one ``loop``, :class:`.affine.Nest`'s test over its
        two digits); thread-local arrays are not written."""
        try:
            written = self.written_roots(body)
        except Refused:
            return False
        if not written:
            return not any(array_written(body, a) for a in self.arrays)
        if trip is None:
            return False
        accesses: dict[str, list[tuple[bool, Poly | None]]] = {}
        subst = row_constants(body)
        for n in sx.walk(body):
            if not (n.type == "subscript_expression" or (n.type == "pointer_expression" and sx.operator(n) == "*")):
                continue
            base = access_base(n)
            if base in self.arrays:
                if array_written(body, base):
                    return False  # a thread-local array filled across iterations: lanes would each hold a part
                continue
            root = self.roots.get(base)
            if root is None or root not in written:
                continue
            accesses.setdefault(root, []).append((access_kind(n) != "reads", self.index_poly(n, subst)))
        nest = collapsed_nest(loop, j, self.unit.body) if loop is not None else None
        local = sx.declared_names(body) - {j} - (nest.digits if nest is not None else set())
        for seen in accesses.values():
            if any(f is None or any(set(m) & local for m in f) for _, f in seen):
                return False  # an index that moves within an iteration (an inner loop's variable): not proven
        for root, seen in accesses.items():
            for is_write, f in seen:
                if not is_write:
                    continue
                for _, g in seen:
                    if f is None or g is None or not (nest.independent(f, g) if nest else independent(f, g, j, trip)):
                        return False
        return True

    def index_poly(self, access: Node, subst: dict[str, Poly] | None = None) -> Poly | None:
        """The element ``access`` touches, relative to its buffer's start (:func:`index_poly`)."""
        return index_poly(access, self.offsets, subst)

    def buffer_accesses(self, body: Node, subst: dict[str, Poly]) -> list[tuple[str, Poly | None]]:
        """``(pointer, element)`` of every access under ``body`` to a buffer of the kernel (``p[i]``, ``*p``, a load or
        store hint's ``p + i``; thread-local arrays left out), the element a polynomial relative to the buffer's start,
        None where it is not one."""
        out = []
        for n in sx.walk(body):
            if n.type == "call_expression" and sx.call_name(n) in LOAD_FUNCS | STORE_FUNCS and sx.call_args(n):
                base, f = self.address_poly(sx.call_args(n)[0], subst)  # __ldg(p + i), __stcs(&p[i], v)
            elif n.type == "subscript_expression" or (n.type == "pointer_expression" and sx.operator(n) == "*"):
                base = access_base(n)
                f = self.index_poly(n, subst) if base in self.roots else None
            else:
                continue
            if base not in self.arrays and base in self.roots:
                out.append((base, f))
        return out

    def strides_columns(self, loop: Node, j: str, index: str) -> bool:
        """The loop over ``j`` walks columns: at least one buffer access in it is ``a * j + index + b`` (``a`` not 1, ``a``
        and ``b`` free of ``index``: consecutive threads on consecutive elements, iterations a stride apart), and every
        other access that moves with ``j`` is free of ``index`` (``v[j]``: the same element for every thread); ``index``
        is the thread's own (row or column) index. Thread-local arrays are not counted; an index that is no polynomial,
        or that holds ``index`` any other way (``x[index * N + j]``: a row), makes it False."""
        body = loop.child_by_field_name("body")
        subst = row_constants(self.unit.body)
        mine = subst.pop(index, None)  # what index is initialised from, folded back into index where constants hold it
        fast = _remainders_of(self.unit.body, index)  # j = idx % D2: consecutive threads, consecutive j (a flat index)
        found = False
        for _, f in self.buffer_accesses(body, subst):
            if f is not None and mine:
                k = f.get(next(iter(mine)), 0) // next(iter(mine.values()))
                if k and all(f.get(m) == k * c for m, c in mine.items()):
                    f = add(add(f, {m: -k * c for m, c in mine.items()}), {(index,): k})
            if f is not None and fast:
                f = {tuple(index if x in fast else x for x in m): c for m, c in f.items()}
            parts = None if f is None else split(f, j)
            if parts is None:
                return False
            a, b = parts
            if not a or not any(index in m for m in list(a) + list(b)):
                continue  # the same element in every iteration, or for every thread
            if a == {(): 1} or any(index in m for m in a) or b.get((index,)) != 1 or any(
                    index in m for m in b if m != (index,)):
                return False
            found = True
        return found

    def address_poly(self, arg: Node, subst: dict[str, Poly] | None = None) -> tuple[str | None, Poly | None]:
        """``(pointer name, element as a polynomial relative to its buffer's start)`` of an address ``p``, ``p + i`` or
        ``&p[i]`` (an intrinsic's pointer argument); ``(name or None, None)`` when it is not one of these."""
        base = _base_name(arg)
        a = sx.unparen(sx.uncast(arg))
        if a is not None and a.type == "pointer_expression" and sx.operator(a) == "&":
            sub = sx.unparen(a.child_by_field_name("argument"))
            return base, self.index_poly(sub, subst) if sub is not None and sub.type == "subscript_expression" else None
        p, off = poly(arg, subst), self.offsets.get(base)
        if p is None or off is None or p.get((base,)) != 1 or any(base in m for m in p if m != (base,)):
            return base, None
        return base, add(add(p, {(base,): -1}), off)

    def read_later(self, node: Node, roots: set[str]) -> bool:
        """Code after ``node`` in the row's code reads one of ``roots`` (through any name)."""
        names = {n for n, r in self.roots.items() if r in roots} | roots
        later = self.data[node.end_byte:self.end].decode(errors="replace")
        tree = sx.parse(later.encode())
        return any(n.type == "identifier" and sx.text(n) in names for n in sx.walk(tree.root_node))


# -- helpers on the syntax tree -------------------------------------------------------------------------------


def _check_whole(stmt: Node) -> None:
    """The row's code as a whole: nothing that ties a thread to its position in the block or grid."""
    if sx.contains_call(stmt, COLLECTIVES):
        raise Refused(f"a barrier or warp collective at line {stmt.start_point[0] + 1}")
    if sx.identifiers(stmt) & BUILTINS:
        raise Refused(f"threadIdx/blockIdx/blockDim/gridDim used in the row's code (line {stmt.start_point[0] + 1})")
    for n in sx.walk(stmt):
        if n.type in ("type_qualifier", "storage_class_specifier") and sx.text(n) in ("__shared__", "static"):
            raise Refused("shared or static data in the row's code")
        if n.type in ("gnu_asm_expression", "asm_statement") or sx.text(n) == "asm" and n.type == "identifier":
            raise Refused("inline asm in the row's code")
        if n.type in ("goto_statement", "labeled_statement"):
            raise Refused("goto in the row's code")


def value_dead_after(fn: Node, loop: Node, j: str) -> bool:
    """Whether the value ``loop`` leaves in ``j`` is never read: every mention of ``j`` in the function ``fn`` outside
    ``loop``, but its declaration, is inside a ``for`` loop whose initializer assigns ``j``."""
    for n in sx.walk(fn):
        if not sx.is_ident(n, j) or loop.start_byte <= n.start_byte < loop.end_byte:
            continue
        p = n.parent
        if p is not None and (p.type == "declaration" or (p.type == "init_declarator" and p.child_by_field_name("declarator") == n)):
            continue
        if not any(_assigns_in_init(f, j) for f in _ancestors(n)):
            return False
    return True


def _assigns_in_init(f: Node, j: str) -> bool:
    """``f`` is a ``for`` loop whose initializer assigns ``j``."""
    if f.type != "for_statement":
        return False
    a = sx.unparen(f.child_by_field_name("initializer"))
    return a is not None and a.type == "assignment_expression" and sx.operator(a) == "=" and sx.is_ident(
        sx.unparen(a.child_by_field_name("left")), j)


def _ancestors(n: Node):
    p = n.parent
    while p is not None:
        yield p
        p = p.parent


def _mentioned_outside(unit: Unit, loop: Node, names: set[str]) -> set[str]:
    """Those of ``names`` that the kernel mentions outside ``loop`` other than as the name a declaration declares
    (without reading anything: ``float v;``, ``float v = 0.0f;``)."""
    out = set()
    for n in sx.walk(unit.fn):
        if n.type != "identifier" or sx.text(n) not in names or loop.start_byte <= n.start_byte < loop.end_byte:
            continue
        parent = n.parent
        declares = parent is not None and (
            (parent.type == "declaration" and any(d == n for d in parent.children_by_field_name("declarator")))
            or (parent.type == "init_declarator" and parent.child_by_field_name("declarator") == n
                and parent.parent is not None and parent.parent.type == "declaration"))
        if not declares:
            out.add(sx.text(n))
    return out


def _visible_at(node: Node, unit: Unit) -> set[str]:
    """Names declared around ``node``: parameters, declarations before it in enclosing blocks, enclosing loops' variables."""
    out = set(sx.declared_names(sx.function_declarator(unit.fn)))
    child, parent = node, node.parent
    while parent is not None and parent != unit.fn:
        if parent.type == "compound_statement":
            for s in parent.named_children:
                if s.start_byte >= child.start_byte:
                    break
                if s.type == "declaration":
                    out |= sx.declared_names(s)
        elif parent.type == "for_statement":
            init = parent.child_by_field_name("initializer")
            if init is not None and init.type == "declaration" and init != child:
                out |= sx.declared_names(init)
        child, parent = parent, parent.parent
    return out


def _span_nodes(stmts: list[Node]) -> Node:
    """A node covering ``stmts`` for the name helpers (their common parent)."""
    return stmts[0].parent if stmts else None


@dataclass(frozen=True)
class RowLoop:
    """A grid-stride loop over rows, ``for (T r = blockIdx.x * blockDim.x + threadIdx.x; r < n; r += blockDim.x *
    gridDim.x) {...}``, as the body's last statement: the index (name, type, initial value), the bound, the row's
    code (``rest``), and the loop and its update (rewritten to stride over groups of lanes)."""

    name: str
    type_node: Node
    init: Node
    bound: Node
    rest: list[Node]
    loop: Node
    update: Node


def _row_loop(unit: Unit) -> RowLoop | None:
    """The :class:`RowLoop` of a 1-D ``policy = "free"`` kernel, or None."""
    if unit.body is None or unit.spec.launch.policy != "free" or len(unit.launch.grid) != 1 or not unit.block_is_1d():
        return None
    stmts = sx.statements(unit.body)
    if not stmts or stmts[-1].type != "for_statement":
        return None
    loop = stmts[-1]
    init, cond, upd = (loop.child_by_field_name(f) for f in ("initializer", "condition", "update"))
    index = _index_decl(init) if init is not None and init.type == "declaration" else None
    if index is None or cond is None or upd is None:
        return None
    name, type_node, value = index
    c = sx.unparen(cond)
    if c is None or c.type != "binary_expression":
        return None
    left, right, op = sx.unparen(c.child_by_field_name("left")), sx.unparen(c.child_by_field_name("right")), sx.operator(c)
    bound = right if op == "<" and sx.is_ident(left, name) else left if op == ">" and sx.is_ident(right, name) else None
    u = sx.unparen(upd)
    if bound is None or u.type != "assignment_expression" or sx.operator(u) != "+=" or not sx.is_ident(sx.unparen(u.child_by_field_name("left")), name):
        return None
    step = sx.uncast(u.child_by_field_name("right"))
    if step is None or step.type != "binary_expression" or sx.operator(step) != "*" or {
            v for f in (step.child_by_field_name("left"), step.child_by_field_name("right"))
            for v in ("blockDim", "gridDim") if sx.is_builtin(f, v)} != {"blockDim", "gridDim"}:
        return None
    body = loop.child_by_field_name("body")
    rest = sx.statements(body) if body.type == "compound_statement" else [body]
    if not rest or any(s.type != "declaration" or sx.written_names(s) - sx.declared_names(s) for s in stmts[:-1]):
        return None
    return RowLoop(name, type_node, value, bound, rest, loop, u)


def _row_guard(unit: Unit, batch: bool = False, why: list[str] | None = None) -> ElementGuard | None:
    """:func:`.opening.element_guard`'s tolerant reading, with the declarations between the row index and its guard
    (``int r = ...; int base = r * N; if (r >= M) return;``) in the row's code: they stay where they are and run on
    every lane. ``batch``: also a 2-D/3-D grid with block-uniform batch indices (``int b = blockIdx.y;``) and other
    declarators in the index's declaration, which :func:`index_edit` and :meth:`RowParallelPass._launch` keep (scan,
    which rewrites the index's statement whole and launches a 1-D grid, reads without them)."""
    return element_guard(unit, tolerant=True, between=True, shared=batch, batch=batch, why=why)


def index_edit(unit: Unit, g: ElementGuard, index: str, note: str, lane: str) -> tuple[int, int, bytes]:
    """The edit giving the row index ``g.name`` the value ``index`` (the declaration's other declarators kept), with
    ``// note`` after it and the lane's declaration ``lane`` on the next line."""
    first = index_statement(unit, g)
    data = unit.data
    indent, _ = sx.line_indent(data, first.start_byte)
    text = (data[first.start_byte:g.init.start_byte] + index.encode() + data[g.init.end_byte:first.end_byte]
            + f"  // {note}\n{indent.decode()}{lane}".encode())
    return first.start_byte, first.end_byte, text


def index_statement(unit: Unit, g: ElementGuard) -> Node:
    """The statement declaring the thread's index (the first of :class:`ElementGuard` ``g``)."""
    return next(s for s in sx.statements(unit.body) if s.start_byte == g.start)


def _local_arrays(body: Node) -> set[str]:
    out = set()
    for n in sx.walk(body):
        if n.type == "declaration":
            for d in n.children_by_field_name("declarator"):
                inner = d.child_by_field_name("declarator") if d.type == "init_declarator" else d
                if inner is not None and inner.type == "array_declarator":
                    ident = sx.innermost_identifier(inner)
                    if ident is not None:
                        out.add(sx.text(ident))
    return out


def pointer_roots(unit: Unit) -> dict[str, str]:
    """Each pointer name (parameters, and local pointers initialised from one of them) -> the parameter it points into.

    A local pointer initialised from two buffers, or from none, is left out (writes through it refuse the pass).
    """
    roots = {name: name for name in unit.pointers}
    changed = True
    while changed:
        changed = False
        for n in sx.walk(unit.body):
            if n.type != "declaration":
                continue
            for d in n.children_by_field_name("declarator"):
                if d.type != "init_declarator":
                    continue
                inner = d.child_by_field_name("declarator")
                if inner is None or inner.type != "pointer_declarator":
                    continue
                name = sx.text(sx.innermost_identifier(inner))
                if name in roots:
                    continue
                found = {roots[i] for i in sx.identifiers(d.child_by_field_name("value")) if i in roots}
                if len(found) == 1:
                    roots[name] = found.pop()
                    changed = True
    return roots


def pointer_offsets(unit: Unit, roots: dict[str, str]) -> dict[str, Poly]:
    """Each pointer name -> its offset from the start of its buffer, as a polynomial (parameters: 0; ``T* p = x +
    e``, ``e + x``, ``x + e1 + e2``, ``&x[e]``: x's offset + e). Pointers written after their declaration, or
    initialised otherwise, are left out."""
    offsets: dict[str, Poly] = {name: {} for name in unit.pointers}
    written = sx.written_names(unit.body)
    for n in sx.walk(unit.body):
        if n.type != "declaration":
            continue
        for d in n.children_by_field_name("declarator"):
            inner = d.child_by_field_name("declarator") if d.type == "init_declarator" else None
            if inner is None or inner.type != "pointer_declarator":
                continue
            name = sx.text(sx.innermost_identifier(inner))
            if name not in roots or name in offsets or name in written:
                continue
            raw = d.child_by_field_name("value")
            if any(c.type == "cast_expression" and "*" in sx.text(c.child_by_field_name("type"))
                   for c in sx.walk(raw) if raw is not None):
                continue  # (float*)((char*)p + 32): a pointer cast changes the offset's unit; left out
            value = sx.uncast(raw)
            off = None
            if value is not None and value.type == "binary_expression" and sx.operator(value) in ("+", "-"):
                off = _sum_offset(value, offsets)
            elif value is not None and value.type == "pointer_expression" and sx.operator(value) == "&":
                sub = sx.unparen(value.child_by_field_name("argument"))
                arg = sx.uncast(sub.child_by_field_name("argument")) if sub is not None and sub.type == "subscript_expression" else None
                if sx.is_ident(arg) and sx.text(arg) in offsets:
                    e = poly(sx.subscript_index(sub))
                    off = None if e is None else add(offsets[sx.text(arg)], e)
            elif sx.is_ident(value) and sx.text(value) in offsets:
                off = dict(offsets[sx.text(value)])
            if off is not None:
                offsets[name] = off
    for name in written:
        offsets.pop(name, None)  # a pointer moved after its declaration (parameters too): its offset is unknown
    return offsets


def _sum_offset(value: Node, offsets: dict[str, Poly]) -> Poly | None:
    """The offset of ``p + e1 + e2 - e3 ...`` (``p`` one pointer of ``offsets``, anywhere in the sum, added once; the
    other terms integer polynomials, casts allowed: ``A + (size_t)b * M * K + (size_t)i * K``), else None."""
    total = poly(value)
    if total is None:
        return None
    ptrs = [m for m in total if any(v in offsets for v in m)]
    if len(ptrs) != 1 or len(ptrs[0]) != 1 or total[ptrs[0]] != 1:
        return None
    rest = {m: c for m, c in total.items() if m != ptrs[0]}
    return add(offsets[ptrs[0][0]], rest)


REPEATED_TRIPS = 64  # iterations of a serial loop every lane may repeat (a window, a head's channels)
SHORT_SPLIT = 16  # a split loop this short needs two iterations a lane (_check_length)


def _remainders_of(body: Node, index: str) -> set[str]:
    """Locals declared once, never written, as ``index % E`` (``E`` free of ``index``): the fastest digit of a flat
    thread index, consecutive for consecutive threads (but where it wraps)."""
    counts = sx.declaration_counts(body)
    written = sx.written_names(body)
    out = set()
    for n in sx.walk(body):
        if n.type != "init_declarator" or not sx.is_ident(n.child_by_field_name("declarator")):
            continue
        name, v = sx.text(n.child_by_field_name("declarator")), sx.uncast(n.child_by_field_name("value"))
        if counts.get(name) != 1 or name in written or v is None or v.type != "binary_expression" or sx.operator(v) != "%":
            continue
        if sx.is_ident(sx.uncast(v.child_by_field_name("left")), index) and index not in sx.identifiers(v.child_by_field_name("right")):
            out.add(name)
    return out


def loop_trips(unit: Unit, loop: Node) -> int | None:
    """The most iterations ``loop`` runs at the spec's bench sizes: its literal trip count (the file's constants
    expanded), or ``for (T j = a; j < b; ...)`` with ``b - a`` a spec expression evaluated at each bench size; None
    when neither can be read (a while loop, a bound read from memory)."""
    trips = sx.literal_trips(loop, unit.notes.get("constants"))
    if trips is not None:
        return trips
    head = loop_head(loop) if loop.type == "for_statement" else None
    if head is None:
        return None
    cond = sx.unparen(loop.child_by_field_name("condition"))
    if cond is None or cond.type != "binary_expression" or sx.operator(cond) not in ("<", "<=", ">", ">="):
        return None
    bound = cond.child_by_field_name("right" if sx.operator(cond) in ("<", "<=") else "left")
    expr = spec_expression(unit, bound, head[1])
    if expr is None or not unit.spec.bench.sizes:
        return None
    try:
        return max(int(evaluate(expr, size)) for size in unit.spec.bench.sizes)
    except ExprError:
        return None


def split_trips(unit: Unit, loop: Node, j: str) -> int | None:
    """The most iterations the ``for`` loop over ``j`` runs at the bench sizes, its trip count read as a polynomial
    (``(g + 1) * cpg - g * cpg`` is ``cpg``) and then through the spec's values (:func:`spec_expression`); None where
    it cannot be read."""
    trips = loop_trips(unit, loop)
    if trips is not None:
        return trips
    init = loop.child_by_field_name("initializer")
    cond = sx.unparen(loop.child_by_field_name("condition"))
    start = None
    if init is not None and init.type == "declaration":
        ds = init.children_by_field_name("declarator")
        start = ds[0].child_by_field_name("value") if len(ds) == 1 and ds[0].type == "init_declarator" else None
    if start is None or cond is None or cond.type != "binary_expression":
        return None
    trip = _trip(start, cond, j)
    if trip is None or len(trip) != 1:
        return None
    ((mono, coef),) = trip.items()
    if len(mono) != 1 or coef != 1:
        return None
    name = mono[0]
    ident = next((n for n in sx.walk(loop) if n.type == "identifier" and sx.text(n) == name), None)
    expr = spec_expression(unit, ident, None, start_zero=True) if ident is not None else None
    if expr is None:
        return None
    try:
        return max(int(evaluate(expr, size)) for size in unit.spec.bench.sizes)
    except ExprError:
        return None


def _trip(start: Node, bound: Node, j: str) -> Poly | None:
    """How many values ``j`` takes in ``for (j = start; j < b; ...)`` (``<=``: one more), as a polynomial."""
    a = poly(start)
    op = sx.operator(bound)
    b = poly(bound.child_by_field_name("right" if op in ("<", "<=") else "left"))
    if a is None or b is None:
        return None
    trip = add(b, {m: -c for m, c in a.items()})
    return add(trip, {(): 1}) if op in ("<=", ">=") else trip


def written_roots(node: Node, roots: dict[str, str], arrays: set[str]) -> set[str]:
    """Buffers (``roots``: pointer name -> the parameter it points into) written under ``node``; thread-local
    ``arrays`` excluded. Raises :class:`Refused` for a write whose buffer it cannot tell and for a pointer passed to a
    function that is not a load."""
    out = set()
    for n in sx.walk(node):
        target = _target(n)
        if target is None:
            name = sx.call_name(n)
            if name and (name.startswith("atomic") or name in STORE_FUNCS):
                args = sx.call_args(n)
                base = _base_name(args[0]) if args else None
                if base is None:
                    raise Refused(f"cannot tell what {sx.text(n)!r} writes")
                out.add(roots.get(base, base))
            elif n.type == "call_expression" and name not in LOAD_FUNCS and any(
                    _base_name(a) in roots or _base_name(a) in arrays for a in sx.call_args(n)):
                raise Refused(f"a pointer passed to {sx.text(n.child_by_field_name('function'))!r}: what it writes is unknown")
            continue
        base = access_base(sx.unparen(target))
        if base is None or base in arrays:
            continue  # a scalar, or a thread-local array
        if base not in roots:
            raise Refused(f"cannot tell which buffer {base!r} points into")
        out.add(roots[base])
    return out


def index_poly(access: Node, offsets: dict[str, Poly], subst: dict[str, Poly] | None = None) -> Poly | None:
    """The element ``access`` (``p[i]``, ``*p``, ``*(p + i)``) touches, as a polynomial relative to its buffer's start
    (``offsets``: each pointer's offset into its buffer)."""
    if access.type == "subscript_expression":
        base = sx.text(sx.uncast(access.child_by_field_name("argument")))
        idx = poly(sx.subscript_index(access), subst)
    else:
        arg = sx.uncast(access.child_by_field_name("argument"))
        if sx.is_ident(arg):
            base, idx = sx.text(arg), {}
        elif arg is not None and arg.type == "binary_expression" and sx.operator(arg) == "+" and sx.is_ident(sx.uncast(arg.child_by_field_name("left"))):
            base, idx = sx.text(sx.uncast(arg.child_by_field_name("left"))), poly(arg.child_by_field_name("right"), subst)
        else:
            return None
    off = offsets.get(base)
    return None if off is None or idx is None else add(off, idx)


def _base_name(node: Node | None) -> str | None:
    """The pointer name of ``p``, ``p + k``, ``&p[k]``."""
    node = sx.uncast(node)
    if sx.is_ident(node):
        return sx.text(node)
    if node is None:
        return None
    if node.type == "binary_expression" and sx.operator(node) in ("+", "-"):
        return _base_name(node.child_by_field_name("left")) or _base_name(node.child_by_field_name("right"))
    if node.type == "pointer_expression" and sx.operator(node) == "&":
        return access_base(sx.unparen(node.child_by_field_name("argument")))
    return None


def access_base(node: Node | None) -> str | None:
    """The array or pointer name accessed by ``p[i]``, ``*p``, ``*(p + i)``, ``p[i].x``; None for a plain variable."""
    while node is not None and node.type == "field_expression":
        node = sx.unparen(node.child_by_field_name("argument"))
    if node is None:
        return None
    if node.type == "subscript_expression":
        arg = sx.uncast(node.child_by_field_name("argument"))
        return sx.text(arg) if sx.is_ident(arg) else "?"
    if node.type == "pointer_expression" and sx.operator(node) == "*":
        return _base_name(node.child_by_field_name("argument")) or "?"
    return None


def row_constants(body: Node) -> dict[str, Poly]:
    """Scalars declared in ``body`` with an initialiser and never written after (``int idx = r * N + j;``), as
    polynomials of what they are initialised from (earlier ones substituted)."""
    written = sx.written_names(body)
    out: dict[str, Poly] = {}
    for n in sx.walk(body):
        if n.type != "declaration":
            continue
        for d in n.children_by_field_name("declarator"):
            if d.type != "init_declarator" or not sx.is_ident(d.child_by_field_name("declarator")):
                continue
            name = sx.text(d.child_by_field_name("declarator"))
            if name in written or name in out:
                continue
            p = poly(d.child_by_field_name("value"), out)
            if p is not None:
                out[name] = p
    return out


def _target(n: Node) -> Node | None:
    """What an assignment (``=``, ``op=``) or an increment/decrement writes; None for any other node."""
    if n.type == "assignment_expression":
        return n.child_by_field_name("left")
    if n.type == "update_expression":
        return n.child_by_field_name("argument")
    return None


def array_written(body: Node, name: str) -> bool:
    """Whether ``body`` assigns to an element of array or pointer ``name`` (``name[i] = ...``, ``*name += ...``)."""
    return any((t := _target(n)) is not None and access_base(sx.unparen(t)) == name for n in sx.walk(body))


def loop_head(loop: Node) -> tuple[str, Node] | None:
    """``(j, a)`` for ``for (T j = a; j < b; j++)`` (``<=``, ``b > j``; ``++j``, ``j += 1``, ``j = j + 1``)."""
    init, cond, upd = (loop.child_by_field_name(f) for f in ("initializer", "condition", "update"))
    if init is None or cond is None or upd is None or init.type != "declaration":
        return None
    ds = init.children_by_field_name("declarator")
    if len(ds) != 1 or ds[0].type != "init_declarator" or sx.type_text(init.child_by_field_name("type")) not in sx.INT_TYPES:
        return None
    j = sx.text(ds[0].child_by_field_name("declarator"))
    if step_one_bound(cond, upd, j) is None:
        return None
    return j, ds[0].child_by_field_name("value")


def step_one_bound(cond: Node, upd: Node, j: str) -> tuple[Node, bool] | None:
    """``(b, inclusive)`` when a ``for`` loop's condition and update are ``j < b`` (``<=``: inclusive; or ``b > j``,
    ``b >= j``) with ``b`` free of ``j``, and a step of one (``j++``, ``++j``, ``j += 1``, ``j = j + 1``); else None."""
    c = sx.unparen(cond)
    if c is None or c.type != "binary_expression":
        return None
    op, left, right = sx.operator(c), sx.unparen(c.child_by_field_name("left")), sx.unparen(c.child_by_field_name("right"))
    if op in ("<", "<=") and sx.is_ident(left, j) and j not in sx.identifiers(right):
        bound = c.child_by_field_name("right")
    elif op in (">", ">=") and sx.is_ident(right, j) and j not in sx.identifiers(left):
        bound = c.child_by_field_name("left")
    else:
        return None
    u = sx.unparen(upd)
    step_one = (
        (u.type == "update_expression" and "++" in sx.text(u) and sx.is_ident(sx.unparen(u.child_by_field_name("argument")), j))
        or (u.type == "assignment_expression" and sx.operator(u) == "+=" and sx.is_ident(sx.unparen(u.child_by_field_name("left")), j)
            and sx.is_number(u.child_by_field_name("right"), 1))
        or (u.type == "assignment_expression" and sx.operator(u) == "=" and sx.is_ident(sx.unparen(u.child_by_field_name("left")), j)
            and _is_plus_one(sx.unparen(u.child_by_field_name("right")), j))
    )
    return (bound, op in ("<=", ">=")) if step_one else None


def _is_plus_one(node: Node | None, j: str) -> bool:
    if node is None or node.type != "binary_expression" or sx.operator(node) != "+":
        return False
    a, b = sx.unparen(node.child_by_field_name("left")), sx.unparen(node.child_by_field_name("right"))
    return (sx.is_ident(a, j) and sx.is_number(b, 1)) or (sx.is_ident(b, j) and sx.is_number(a, 1))


def auto_shape(unit: Unit, rows: str, n: str, batches: str | None = None,
               per_lane: int = ELEMENTS_PER_LANE) -> tuple[list[str], str]:
    """``([lanes, rows per block], grid)`` as expressions of the sizes, for ``rows`` rows of ``n`` elements: the fewest of
    :data:`AUTO_TIERS` lanes giving each at most ``per_lane`` elements and, with the GPU's facts in the unit's notes, at
    least one full-occupancy wave of threads over all rows (``rows`` times ``batches``, the grid's dimensions past x,
    when given); 256 threads a block of rows up to a warp each, else one row a block."""
    facts = unit.notes.get(FACTS_NOTE)
    want = f"cdiv({n}, {per_lane})"
    if facts is not None:
        total = rows if batches is None else f"({rows}) * {batches}"
        want = f"max({want}, cdiv({facts.sm_count * threads_per_sm(facts.arch)}, {total}))"
    y = f"max(0, {want} - 1)"
    lanes = str(AUTO_TIERS[0]) + "".join(f" + {b - a} * min(1, {y} // {a})" for a, b in zip(AUTO_TIERS, AUTO_TIERS[1:]))
    per_block = f"max(1, {GROUP_BLOCK // 32} * (32 // ({lanes})))"
    return [lanes, per_block], f"cdiv({rows}, {per_block})"


def batch_count(unit: Unit) -> str | None:
    """The product of the launch's grid dimensions past x (the batches of a 2-D/3-D grid), or None for a 1-D grid."""
    return " * ".join(f"({g})" for g in unit.launch.grid[1:]) or None


def spec_expression(unit: Unit, bound: Node | None, start: Node | None, start_zero: bool = False) -> str | None:
    """The trip count ``bound - start`` of a loop as a spec expression (scalar parameters replaced by their spec
    values, the row's constants by what they are initialised from, ``/`` by ``//``), or None when it is not one."""
    values = {a.name: a.value for a in unit.spec.args if a.role == "scalar" and a.value is not None}
    written = sx.written_names(unit.body)
    inits: dict[str, Node] = {}
    counts: dict[str, int] = {}
    for n in sx.walk(unit.body):
        if n.type == "declaration":
            for d in n.children_by_field_name("declarator"):
                ident = sx.innermost_identifier(d)
                if ident is None:
                    continue
                counts[sx.text(ident)] = counts.get(sx.text(ident), 0) + 1
                if d.type == "init_declarator" and sx.is_ident(d.child_by_field_name("declarator")):
                    inits[sx.text(ident)] = d.child_by_field_name("value")

    def render(node: Node | None, depth: int = 0) -> str | None:
        node = sx.uncast(node)
        if node is None or depth > 20:
            return None
        if node.type == "number_literal":
            v = sx.literal_value(node)
            return str(v) if isinstance(v, int) else None
        if node.type == "identifier":
            name = sx.text(node)
            if name in values:
                return f"({values[name]})"
            if counts.get(name) == 1 and name not in written and name in inits:
                inner = render(inits[name], depth + 1)
                return None if inner is None else f"({inner})"
            return None
        if node.type == "binary_expression" and sx.operator(node) in ("+", "-", "*", "/", "%"):
            a, b = render(node.child_by_field_name("left"), depth + 1), render(node.child_by_field_name("right"), depth + 1)
            op = "//" if sx.operator(node) == "/" else sx.operator(node)
            if a is None or b is None:
                return None
            # an operand that is itself an operation keeps its grouping ((H - 1) * (D - 2); uncast drops the parentheses)
            a, b = (f"({x})" if sx.uncast(node.child_by_field_name(f)).type == "binary_expression" else x
                    for x, f in ((a, "left"), (b, "right")))
            return f"{a} {op} {b}"
        return None

    b, a = render(bound), ("0" if start_zero else render(start))
    if b is None or a is None:
        return None
    expr = b if a == "0" else f"{b} - ({a})"
    try:
        for size in unit.spec.check.sizes + unit.spec.bench.sizes:
            evaluate(expr, size)
    except ExprError:
        return None
    return expr


def rows_expression(unit: Unit, bound: Node) -> str | None:
    """The guard's bound as a spec expression (its names replaced by the spec's scalar values), or None."""
    values = {a.name: a.value for a in unit.spec.args if a.role == "scalar" and a.value is not None}
    names = [n for n in sx.walk(bound) if n.type == "identifier"]
    if not names or any(sx.text(n) not in values for n in names):
        return None
    if any(n.type not in ("identifier", "binary_expression", "parenthesized_expression", "number_literal", "cast_expression",
                          "primitive_type", "type_descriptor", "sized_type_specifier", "(", ")", "*", "+", "-", "/")
           for n in sx.walk(bound)):
        return None
    edits = [(n.start_byte - bound.start_byte, n.end_byte - bound.start_byte, f"({values[sx.text(n)]})".encode())
             for n in names]
    expr = sx.apply_edits(bound.text, edits).decode()
    if bound.type == "cast_expression" or any(n.type == "cast_expression" for n in sx.walk(bound)):
        return None
    try:
        for size in unit.spec.check.sizes[:1]:
            evaluate(expr, size)
    except ExprError:
        return None
    return expr
