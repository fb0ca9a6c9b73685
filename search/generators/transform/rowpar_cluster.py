"""``rowpar_cluster*``: a kernel written one thread per row gets a thread block cluster of C blocks per row.

``rowpar``'s reading and rewrite (:mod:`.rowpar`: the row's loops split across its lanes, accumulations combined, stores
outside the loops by the row's first lane), with the row's lanes the ``C * 1024`` threads of a cluster of ``C`` blocks
of 1024 (sm_90's thread block clusters, compiled in with ``__attribute__((cluster_dims(C, 1, 1)))``)::

    r = blockIdx.x / C;                                          // the cluster's row
    const unsigned ptxf_lane = (blockIdx.x % C) * 1024 + threadIdx.x;  // lane within the row; 0: block rank 0, thread 0
    for (j = a + ptxf_lane; j < n; j += C * 1024) ...            // each split loop
    acc = ptxf_cluster_reduce<C>(acc, op);                       // block trees, then the blocks' results in rank order

The combine reduces each block's part (warp shuffles, shared memory), then every thread reads the C blocks' parts
through distributed shared memory (``mapa``) between two cluster barriers, in rank order: every block of the row gets
the same bits, so conditions and later loops agree on all lanes, as in ``rowpar``. A barrier that ``rowpar`` writes
(a buffer written, then read by other lanes) becomes a cluster barrier (release / acquire at cluster scope).

Why: a row a block leaves the GPU idle when the rows are few and long (BatchNorm's statistics over a channel's N x H x W
values, a LayerNorm over a whole sample, a GroupNorm with few groups): a 64-channel reduction as 64 blocks fills half of
an H200's 132 SMs at one block each. A cluster of C blocks a row gives C times the blocks, and the row's result is
combined on chip, with no workspace buffer or second kernel.

Proposed only with the GPU's facts (its SM count) on sm_90 or later, and only where it can matter: a cluster of C is
proposed where, at some bench size, half of it (C / 2 blocks a row) would still leave one full-occupancy wave of
1024-thread blocks unfilled (rows x C / 2 < wave). The largest such C comes first (:data:`CLUSTER_SIZES`'s order),
the smallest cluster that fills the wave: the lessons reorder them.

``vector_loops`` reads the lane as a group spanning the cluster's blocks (``blockIdx.x / C`` uniform over it,
``blockIdx.x`` not), so the split loops take 16-byte accesses as a block's do.

Refused beyond what ``rowpar`` refuses: no GPU facts, an architecture before sm_90, a row count that is not an
expression of the spec's sizes, rows enough to fill the GPU a block each at every bench size, a grid over 2^31 - 1.
"""
from __future__ import annotations

from ptxfactory.protocol import LaunchConfig
from ptxfactory.protocol.expr import ExprError, evaluate

from .atomic_agg import _arch_number
from .base import Unit
from .grid_stride import FACTS_NOTE, wave_blocks
from .opening import ElementGuard
from .rowpar import HELPER_NEEDS, HELPERS, LANE, MAX_GRID, TUPLE_PARTS, Refused, RowParallelPass, batch_count, rows_expression
from . import syntax as sx

CLUSTER_BLOCK = 1024  # threads a block of the cluster
CLUSTER_SIZES = (16, 8, 4, 2)  # blocks a row; 16 is past the portable 8 (the worker opts the kernel in)
CLUSTER_ARCH = 90  # thread block clusters: sm_90 and later

HELPERS.update({
    "ptxf_cluster_sync": """\
static __device__ __forceinline__ void ptxf_cluster_sync()
{   // every thread of the cluster arrives (its writes released at cluster scope), then waits for all (theirs acquired)
    asm volatile("barrier.cluster.arrive.release.aligned;\\n\\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}""",
    "ptxf_peer": """\
template <typename T>
static __device__ __forceinline__ const T* ptxf_peer(const T* p, unsigned rank)
{   // the same shared-memory variable in block `rank` of this thread's cluster (a generic address)
    unsigned long long q;
    asm volatile("mapa.u64 %0, %1, %2;" : "=l"(q) : "l"(p), "r"(rank));
    return reinterpret_cast<const T*>(q);
}""",
    "ptxf_cluster_reduce": """\
template <int CL, typename T, typename F>
static __device__ __forceinline__ T ptxf_cluster_reduce(T v, F op)
{   // op over every thread of the CL blocks of the cluster: each block's tree, then the blocks' results in rank order
    // through distributed shared memory, so every thread of every block ends with the same value
    __shared__ T slot;
    v = ptxf_block_reduce(v, op);
    if (threadIdx.x == 0u) slot = v;
    ptxf_cluster_sync();                      // every block's slot written (and every block of the cluster started)
    v = *ptxf_peer(&slot, 0u);
#pragma unroll
    for (unsigned k = 1; k < CL; ++k) v = op(v, *ptxf_peer(&slot, k));
    ptxf_cluster_sync();                      // every slot read: they may be rewritten, and the blocks may exit
    return v;
}""",
    "ptxf_cluster_reduce_arg": """\
template <int CL, typename T, typename K, typename B>
static __device__ __forceinline__ void ptxf_cluster_reduce_arg(T& v, K& k, B better)
{   // the cluster-wide ptxf_block_reduce_arg: each block's pair, then the blocks' pairs in rank order
    __shared__ T sv;
    __shared__ K sk;
    ptxf_block_reduce_arg(v, k, better);
    if (threadIdx.x == 0u) { sv = v; sk = k; }
    ptxf_cluster_sync();
    v = *ptxf_peer(&sv, 0u);
    k = *ptxf_peer(&sk, 0u);
#pragma unroll
    for (unsigned r = 1; r < CL; ++r) {
        const T v2 = *ptxf_peer(&sv, r);
        const K k2 = *ptxf_peer(&sk, r);
        if (better(v2, k2, v, k)) { v = v2; k = k2; }
    }
    ptxf_cluster_sync();
}""",
    "ptxf_cluster_merge": """\
template <int CL, typename P>
static __device__ __forceinline__ void ptxf_cluster_merge(P& p)
{   // a tuple's parts (online softmax, Welford) merged over the cluster: each block's, then the blocks' in rank order
    __shared__ P slot;
    ptxf_block_merge(p);
    if (threadIdx.x == 0u) slot = p;
    ptxf_cluster_sync();
    p = *ptxf_peer(&slot, 0u);
#pragma unroll
    for (unsigned r = 1; r < CL; ++r) p.merge(*ptxf_peer(&slot, r));
    ptxf_cluster_sync();
}""",
})
HELPER_NEEDS.update({
    "ptxf_cluster_reduce": ("ptxf_block_reduce", "ptxf_cluster_sync", "ptxf_peer"),
    "ptxf_cluster_reduce_arg": ("ptxf_block_reduce_arg", "ptxf_cluster_sync", "ptxf_peer"),
    "ptxf_cluster_merge": ("ptxf_block_merge", "ptxf_cluster_sync", "ptxf_peer"),
})
# rowpar's block-wide combine -> the cluster's
_CLUSTER_OF = {"ptxf_block_reduce": "ptxf_cluster_reduce", "ptxf_block_reduce_arg": "ptxf_cluster_reduce_arg",
               "ptxf_block_merge": "ptxf_cluster_merge"}


def cluster_facts(unit: Unit):
    """The GPU's facts where thread block clusters can run (sm_90 or later). Raises :class:`Refused` otherwise."""
    facts = unit.notes.get(FACTS_NOTE)
    if facts is None:
        raise Refused("without the GPU's facts (its SM count) whether a block a row leaves it idle is unknown")
    arch = min(_arch_number(unit.spec.arch or facts.arch), _arch_number(facts.arch))
    if arch < CLUSTER_ARCH:
        raise Refused(f"thread block clusters need sm_{CLUSTER_ARCH} or later (sm_{arch})")
    return facts


def cluster_grid(unit: Unit, rows: str, total: str, blocks: int) -> str:
    """The grid ``rows * blocks`` (a cluster of ``blocks`` blocks of :data:`CLUSTER_BLOCK` a row; ``total``: the rows
    of the whole launch, batches included), checked in range at every spec size. Raises :class:`Refused` where a block
    a row already fills a full-occupancy wave at every bench size, or half the cluster would (a smaller one is
    proposed too), or the launch cannot be evaluated."""
    wave = wave_blocks(cluster_facts(unit), CLUSTER_BLOCK)
    grid = f"({rows}) * {blocks}"
    few, short = False, False  # (at some bench size) a block a row leaves the wave unfilled; so would half the cluster
    for size in unit.spec.check.sizes + unit.spec.bench.sizes:
        try:
            if not 0 < int(evaluate(grid, size)) <= MAX_GRID:
                raise Refused(f"grid {grid} out of range at {size}")
            if size in unit.spec.bench.sizes:
                n = int(evaluate(total, size))
                few, short = few or n < wave, short or n * blocks // 2 < wave
        except ExprError as e:
            raise Refused(f"launch {grid} cannot be evaluated at {size}: {e}") from None
    if not few:
        raise Refused(f"a block a row already fills a wave of {wave} blocks of {CLUSTER_BLOCK} threads at every bench "
                      f"size ({total} rows)")
    if not short:
        raise Refused(f"{blocks // 2} blocks a row already fill a wave of {wave} blocks at every bench size")
    return grid


class RowClusterPass(RowParallelPass):
    """One thread per row -> a cluster of ``blocks`` blocks of :data:`CLUSTER_BLOCK` threads per row. See the module
    docstring."""

    group = "grid"
    exact = False  # sums are re-associated, as rowpar's

    def __init__(self, blocks: int):
        if blocks not in CLUSTER_SIZES:
            raise ValueError(f"rowpar_cluster: blocks per row must be one of {CLUSTER_SIZES}, not {blocks!r}")
        self.blocks = blocks
        self.lanes = blocks * CLUSTER_BLOCK
        self.auto = False
        self.block = True  # the combines and barriers span blocks (rowpar's block-wide forms, made cluster-wide)
        self.name = f"rowpar_cluster{blocks}"
        self.step = str(self.lanes)
        self.kind = (RowParallelPass, "cluster")

    # -- the combines and barriers ------------------------------------------------------------------------------

    def _fn(self, auto: str, block: str, group: str) -> str:
        return f"{_CLUSTER_OF[block]}<{self.blocks}>"

    def sync(self) -> str:
        return "ptxf_cluster_sync();"

    def sync_helper(self) -> str:
        return "ptxf_cluster_sync"

    def helpers_for(self, acc) -> list[str]:
        if acc.kind in TUPLE_PARTS:
            return [TUPLE_PARTS[acc.kind], "ptxf_cluster_merge"]
        return ["ptxf_cluster_reduce_arg" if acc.kind == "arg" else "ptxf_cluster_reduce"]

    def merges_tuples(self) -> bool:
        return True

    def _plan(self, unit: Unit):
        if "cluster_dims" in unit.text:
            raise Refused("the kernel already asks for a thread block cluster")
        return super()._plan(unit)

    def _check_length(self, unit: Unit, rw) -> None:
        """(Checked in :meth:`_launch`, after the row count.)"""

    # -- the launch -----------------------------------------------------------------------------------------------

    def _launch(self, unit: Unit, g: ElementGuard, threads: int, rw) -> LaunchConfig:
        cluster_facts(unit)
        rows = rows_expression(unit, g.bound)
        if rows is None:
            raise Refused("the row count is not an expression of the spec's sizes")
        batches = batch_count(unit)
        grid = cluster_grid(unit, rows, f"({rows}) * {batches}" if batches else rows, self.blocks)
        super()._check_length(unit, rw)  # (after the wave: most kernels are refused for their many rows, one reason)
        return LaunchConfig(grid=[grid, *unit.launch.grid[1:]], block=[str(CLUSTER_BLOCK)], shared_mem=unit.launch.shared_mem)

    # -- the rewrite ------------------------------------------------------------------------------------------------

    def row_index(self, ctype: str) -> tuple[str, str, str]:
        c = self.blocks
        return (f"({ctype})(blockIdx.x / {c}u)",
                f"const unsigned {LANE} = (blockIdx.x % {c}u) * {CLUSTER_BLOCK}u + threadIdx.x;",
                f"a cluster of {c} blocks of {CLUSTER_BLOCK} threads per row")

    def row_stride(self, ctype: str) -> str:
        return f"({ctype})(gridDim.x / {self.blocks}u)"

    def extra_edits(self, unit: Unit) -> list[tuple[int, int, bytes]]:
        decl = unit.fn.child_by_field_name("declarator")
        return [(decl.start_byte, decl.start_byte, f"__attribute__((cluster_dims({self.blocks}, 1, 1))) ".encode())]
