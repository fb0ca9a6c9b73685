"""``blockrow_cluster*``: a kernel written one block per row (or as one block) gets a thread block cluster per row.

``blockrow``'s reading (:mod:`.blockrow`: the reduction idioms, the lane-strided loops, the reads of ``partial[0]``),
with the row's lanes the ``C * 1024`` threads of a cluster of ``C`` blocks of 1024 (sm_90's thread block clusters,
``__attribute__((cluster_dims(C, 1, 1)))``) instead of the threads of one block::

    const unsigned ptxf_lane = (blockIdx.x % C) * 1024u + threadIdx.x;  // lane within the row; 0: rank 0, thread 0
    int row = (int)(blockIdx.x / C);                 // (absent in a kernel launched as one block: the row is it)
    for (int i = ptxf_lane; i < n; i += C * 1024u)   // every threadIdx.x is the lane, every blockDim.x the lanes
    const float ptxf_r0 = ptxf_cluster_reduce<C>(value, op);   // each reduction idiom: the blocks' trees, then the
                                                               // blocks' results in rank order (distributed shared memory)
    ptxf_cluster_sync();                             // each other __syncthreads(): the row's lanes span the cluster

Every thread of the cluster gets the same bits from a combine (:mod:`.rowpar_cluster`'s helpers), so later conditions
and loops agree on all lanes, and a store the original makes from ``threadIdx.x == 0`` is made once a row, by block rank 0.

Why: a row a block leaves the GPU idle when the rows are few: the classic first whole-array reduction, ``<<<1, 256>>>``
(a strided loop then a shared tree), runs on one SM of 132; a LayerNorm over a few whole samples, a block each, on a
few. A cluster of C blocks a row gives C times the SMs, the row's result combined on chip, with no workspace buffer,
no second kernel and no atomics: the combine's order is fixed, the bits repeatable.

Proposed as :mod:`.rowpar_cluster` is: with the GPU's facts on sm_90 or later, where at some bench size half the cluster
(C / 2 blocks a row) would leave a full-occupancy wave of 1024-thread blocks unfilled, the largest C first. Refused
beyond what ``blockrow`` refuses: a cluster attribute already there; a row (its strided loop) shorter than the
cluster's lanes at every bench size; a ``return`` that not every lane of a row takes (its cluster would wait at a
barrier for threads that left).
"""
from __future__ import annotations

from ptxfactory.protocol import LaunchConfig
from ptxfactory.protocol.expr import ExprError, evaluate

from . import syntax as sx
from .base import Unit
from .blockrow import BlockRowPass, _constant_steps, _strided_loops, drop_launch_bounds
from .rowpar import LANE, Refused, helper_closure, spec_expression
from .rowpar_cluster import CLUSTER_BLOCK, CLUSTER_SIZES, cluster_grid
from .shuffle_reduce import _is_barrier, _tid_aliases


class BlockClusterPass(BlockRowPass):
    """One block per row (or one block) -> a cluster of ``blocks`` blocks of :data:`CLUSTER_BLOCK` threads per row.
    See the module docstring."""

    group = "grid"
    exact = False  # sums are re-associated, as blockrow's
    one_block = True

    def __init__(self, blocks: int):
        if blocks not in CLUSTER_SIZES:
            raise ValueError(f"blockrow_cluster: blocks per row must be one of {CLUSTER_SIZES}, not {blocks!r}")
        self.blocks = blocks
        self.lanes = blocks * CLUSTER_BLOCK
        self.name = f"blockrow_cluster{blocks}"

    def _plan(self, unit: Unit):
        if unit.body is not None and "cluster_dims" in unit.text:
            raise Refused("the kernel already asks for a thread block cluster")
        row, idioms, shared, launch = super()._plan(unit)
        _check_returns(unit, row)
        return row, idioms, shared, launch

    def _launch(self, unit: Unit, body, aliases: set[str]) -> LaunchConfig:
        """The grid: ``C`` blocks of 1024 per row (a row per block of the original's 1-D grid)."""
        rows = f"({unit.launch.grid[0]})"
        grid = cluster_grid(unit, rows, rows, self.blocks)
        self._check_length(unit, body, aliases)
        return LaunchConfig(grid=[grid], block=[str(CLUSTER_BLOCK)], shared_mem=unit.launch.shared_mem)

    def _check_length(self, unit: Unit, body, aliases: set[str]) -> None:
        """Refuses a row whose strided loops are all shorter than the cluster's lanes at every bench size (most lanes
        would idle; a smaller cluster is proposed too). A length the pass cannot read is not refused."""
        longest = None
        for loop in _strided_loops(body, aliases, unit.block_threads()):
            c = sx.unparen(loop.child_by_field_name("condition"))
            n = spec_expression(unit, c.child_by_field_name("right"), None, start_zero=True)
            if n is None:
                return
            try:
                trips = max(int(evaluate(n, size)) for size in unit.spec.bench.sizes)
            except (ExprError, ValueError):
                return
            longest = trips if longest is None else max(longest, trips)
        if longest is not None and longest < self.lanes:
            raise Refused(f"the row's loops run {longest} iterations at most at the bench sizes, fewer than the "
                          f"{self.lanes} lanes of a cluster of {self.blocks}: most lanes would idle")

    def apply(self, unit: Unit) -> Unit:
        row, idioms, shared, launch = self._plan(unit)
        data, body, c = unit.data, unit.body, self.blocks
        stores = {i.store.id: k for k, i in enumerate(idioms)}
        trees = {i.loop.id for i in idioms}
        reads = {r.id: k for k, i in enumerate(idioms) for r in i.reads}
        between = [(i.barrier.start_byte, i.last.end_byte) for i in idioms]
        steps = {s.id for s in _constant_steps(body, _tid_aliases(body), unit.block_threads())}  # i += 256: the lanes too

        def lane(n) -> bytes | None:  # the row's lanes are the cluster's threads
            if n.id in steps:
                return f"{self.lanes}u".encode()
            if n.type == "field_expression" and sx.is_builtin(n, "threadIdx", "x"):  # (a cast around it stays)
                return LANE.encode()
            if n.type == "field_expression" and sx.is_builtin(n, "blockDim", "x"):
                return f"{self.lanes}u".encode()
            return None

        def replace(n) -> bytes | None:
            if row is not None and n == row.child_by_field_name("value"):
                ctype = sx.type_text(row.parent.child_by_field_name("type"))
                return f"({ctype})(blockIdx.x / {c}u)".encode()
            if n.id in trees:
                return b""
            if n.id in stores:
                k = stores[n.id]
                i = idioms[k]
                combine = "ptxf_a + ptxf_b" if i.op == "+" else f"{i.op}(ptxf_a, ptxf_b)"
                op = f"[](const {i.ctype}& ptxf_a, const {i.ctype}& ptxf_b) {{ return ({i.ctype})({combine}); }}"
                value = sx.render(i.value, data, replace).decode()  # (an earlier group's sh[0] read in it too)
                return (f"const {i.ctype} ptxf_r{k} = ptxf_cluster_reduce<{c}>(({i.ctype})({value}), {op});"
                        f"  // (transform {self.name})").encode()
            if n.id in reads:
                return f"ptxf_r{reads[n.id]}".encode()
            if _is_barrier(n):
                if any(a <= n.start_byte < b for a, b in between):
                    return b""  # an idiom's own barrier, between its stores and its trees
                return b"ptxf_cluster_sync();"
            if n.type == "declaration" and any(k.type == "type_qualifier" and sx.text(k) == "__shared__" for k in n.children):
                return f"// (transform {self.name}: the shared reduction array is gone)".encode()
            return lane(n)

        inner = sx.render(body, data, replace).decode()
        lane_decl = (f"\n    const unsigned {LANE} = (blockIdx.x % {c}u) * {CLUSTER_BLOCK}u + threadIdx.x;  "
                     f"// (transform {self.name}: a row's lanes are a cluster's {self.lanes} threads)")
        text = inner[:1] + lane_decl + inner[1:]  # after the body's "{"
        attr = unit.fn.child_by_field_name("declarator")
        prefix = sx.apply_edits(data[:body.start_byte], [(attr.start_byte, attr.start_byte,
                                                          f"__attribute__((cluster_dims({c}, 1, 1))) ".encode())]
                                + drop_launch_bounds(unit))
        new = prefix + text.encode() + data[body.end_byte:]
        helpers = helper_closure(["ptxf_cluster_reduce", "ptxf_cluster_sync"])
        return unit.with_text(new, launch=launch, helpers=helpers, lanes=self.lanes)


def _check_returns(unit: Unit, row) -> None:
    """Refuses a ``return`` that not every lane of a row takes: one under a condition that reads anything but the row
    index, the kernel's scalar parameters and literals, or one nested below the body's top level."""
    body = unit.body
    row_name = sx.text(row.child_by_field_name("declarator")) if row is not None else None
    params = {a.name for a in unit.spec.args if a.role == "scalar"} - sx.written_names(body)
    for n in sx.walk(body):
        if n.type != "return_statement":
            continue
        stmt = n
        while stmt.parent is not None and stmt.parent.type != "if_statement" and stmt.parent != body:
            stmt = stmt.parent
        guard = stmt.parent
        if guard is None or guard == body or guard.parent != body:
            raise Refused(f"a return at line {n.start_point[0] + 1} that not every lane of a row may take "
                          "(a cluster barrier would wait for threads that left)")
        cond = guard.child_by_field_name("condition")
        names = sx.identifiers(cond)
        if any(x.type == "field_expression" for x in sx.walk(cond)) or not names <= params | {row_name} - {None}:
            raise Refused(f"a return at line {n.start_point[0] + 1} under a condition that may differ between a row's "
                          "lanes (a cluster barrier would wait for threads that left)")
