"""``grid_reduce``: a block-sum kernel that loads one element per thread folds many per thread over a capped grid.

Pattern (the classic first reduction: one element per thread into shared memory, a tree, one atomic per block)::

    __shared__ T sh[B];
    int i = blockIdx.x * blockDim.x + threadIdx.x;     // t: threadIdx.x or a never-written copy of it
    sh[t] = (i < n) ? E : 0;                           // or n > i; E any expression of i (x[i], x[i] * y[i], ...)
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) { if (t < s) sh[t] += sh[t + s]; __syncthreads(); }
    if (t == 0) atomicAdd(out, sh[0]);                 // the only use of sh[0]: a sum into one address

becomes (the tree and the atomic untouched)::

    {   T ptxf_a = 0;
        for (I i = <the index>; i < n; i += (I)gridDim.x * (I)blockDim.x) ptxf_a = ptxf_a + (T)(E);
        sh[t] = ptxf_a;   }

and the 1-D grid ``G`` becomes ``min(G, one full-occupancy wave)`` (:func:`.grid_stride.wave_blocks`, the GPU's facts;
without them the grid stays and each thread folds at most one element). Each block then reduces many elements per
thread before its one atomic: fewer blocks, barriers and atomics per element, the loads of a thread in flight
together. A sum is re-associated (``exact = False``): refused when the spec asks for exact results of a
floating-point sum (``rtol = atol = 0``) or for repeatable bits (``check.deterministic``).

Preconditions, each refusal saying which failed: a 1-D launch, ``policy = "free"``, a literal block of a multiple of
32 threads; exactly one tree loop (:func:`.shuffle_reduce._match_loop`) and it sums; the index declared once, never
written, read only in the load statement; the load statement at the top level of the body, before the loop, its
fallback a literal zero; no ``return`` in the body; ``sh[0]`` read after the loop only as the value of an
``atomicAdd`` to an address that does not depend on the block or thread (a per-block output, ``out[blockIdx.x] =
sh[0]``, would change meaning with the grid); a 32-bit index does not overflow at the spec's sizes.
"""
from __future__ import annotations

from dataclasses import dataclass

from ptxfactory.protocol import LaunchConfig

from . import syntax as sx
from .base import Unit
from .grid_stride import FACTS_NOTE, GridStridePass, wave_blocks
from .opening import _index_decl
from .rowpar import PlannedPass, Refused
from .shuffle_reduce import Reduction, _is_tid, _match_loop, _shared_arrays, _tid_aliases
from .syntax import Node


@dataclass
class _Plan:
    load: Node  # the statement sh[t] = (i < n) ? E : 0;
    red: Reduction
    index: str
    itype: str
    init: Node
    bound: Node
    element: Node  # E


class GridReducePass(PlannedPass):
    """One element per thread into a block's tree sum -> a grid-stride fold per thread, the grid capped at one wave."""

    name = "grid_reduce"
    group = "grid"  # redefines what a thread of the grid does, as grid_stride does
    exact = False  # the sum is re-associated

    def _plan(self, unit: Unit) -> _Plan:
        body = unit.body
        if body is None:
            raise Refused("no kernel body")
        if unit.spec.launch.policy != "free":
            raise Refused(f'the launch policy is "{unit.spec.launch.policy}", not "free": the grid may not change')
        threads = unit.block_threads()
        if len(unit.launch.grid) != 1 or not unit.block_is_1d() or threads is None or threads % 32 or not 32 <= threads <= 1024:
            raise Refused("not a 1-D launch with a literal block of a multiple of 32 threads")
        shared, aliases = _shared_arrays(body), _tid_aliases(body)
        reds = [r for loop in sx.walk(body) if loop.type == "for_statement"
                and (r := _match_loop(loop, shared, aliases, threads)) is not None]
        if len(reds) != 1:
            raise Refused(f"{'no' if not reds else 'more than one'} shared-memory tree reduction loop")
        red = reds[0]
        if red.op != "+":
            raise Refused(f"the tree combines with {red.op}, not a sum")
        check = unit.spec.check
        if red.ctype in ("float", "double") and check.rtol == 0 and check.atol == 0:
            raise Refused("a floating-point sum would be re-associated, and the spec asks for exact results (rtol = atol = 0)")
        if red.ctype in ("float", "double") and check.deterministic:
            raise Refused("a floating-point sum in another order, and the spec asks for repeatable bits (check.deterministic)")
        if any(n.type == "return_statement" for n in sx.walk(body)):
            raise Refused("a return in the kernel")
        top = [c for c in body.named_children if c.type != "comment"]
        index = next((d for s in top if s.start_byte < red.loop.start_byte and (d := _index_decl(s, shared=True))), None)
        if index is None:
            raise Refused("no index T i = blockIdx.x * blockDim.x + threadIdx.x declared before the tree")
        name, type_node, init = index
        itype = sx.type_text(type_node)
        if itype not in sx.INT_TYPES or not GridStridePass()._no_overflow(unit, itype):
            raise Refused(f"the index's type {itype!r} could overflow a grid-stride loop at the spec's sizes")
        load, bound, element = self._load(top, red, aliases, name)
        if name in sx.written_names(body) or sx.identifiers(bound) & sx.written_names(body):
            raise Refused(f"the index {name!r} or the bound {sx.text(bound)!r} is written in the kernel")
        uses = [n for n in sx.walk(body) if sx.is_ident(n, name)]
        if any(not (load.start_byte <= n.start_byte < load.end_byte) for n in uses if n.parent.type != "init_declarator"):
            raise Refused(f"the index {name!r} is read outside the load of {red.array}[{sx.text(sx.unparen(init))}]")
        self._check_result(body, red)
        return _Plan(load, red, name, itype, init, bound, element)

    def _load(self, top: list[Node], red: Reduction, aliases: set[str], index: str) -> tuple[Node, Node, Node]:
        """``(statement, bound n, element E)`` of the top-level ``sh[t] = (i < n) ? E : 0;`` before the tree."""
        for s in top:
            if s.start_byte >= red.loop.start_byte or s.type != "expression_statement" or not s.named_children:
                continue
            a = s.named_children[0]
            if a.type != "assignment_expression" or sx.operator(a) != "=":
                continue
            lhs = a.child_by_field_name("left")
            if lhs.type != "subscript_expression" or not sx.is_ident(lhs.child_by_field_name("argument"), red.array):
                continue
            idx = [c for c in lhs.child_by_field_name("indices").named_children if c.type != "comment"]
            if len(idx) != 1 or not _is_tid(idx[0], aliases):
                continue
            v = sx.unparen(a.child_by_field_name("right"))
            if v is None or v.type != "conditional_expression":
                raise Refused(f"line {s.start_point[0] + 1}: the load is not {red.array}[t] = (i < n) ? E : 0")
            cond = sx.unparen(v.child_by_field_name("condition"))
            then, other = v.child_by_field_name("consequence"), v.child_by_field_name("alternative")
            bound = _bound_of(cond, index)
            if bound is None:
                raise Refused(f"line {s.start_point[0] + 1}: the condition {sx.text(cond)!r} is not {index} < n")
            if not sx.is_number(sx.uncast(other), 0):
                raise Refused(f"line {s.start_point[0] + 1}: the fallback {sx.text(other)!r} is not zero (a sum's identity)")
            return s, bound, then
        raise Refused(f"no top-level load {red.array}[t] = (i < n) ? E : 0 before the tree")

    def _check_result(self, body: Node, red: Reduction) -> None:
        """``sh[0]`` read after the tree only as the value of ``atomicAdd`` to an address uniform over the grid."""
        for n in sx.walk(body):
            if n.start_byte < red.loop.end_byte or n.type != "subscript_expression":
                continue
            if not sx.is_ident(n.child_by_field_name("argument"), red.array):
                continue
            call = n.parent.parent if n.parent is not None and n.parent.type == "argument_list" else None
            args = sx.call_args(call) if call is not None and call.type == "call_expression" else []
            if sx.call_name(call) != "atomicAdd" or len(args) != 2 or args[1] != n:
                raise Refused(f"line {n.start_point[0] + 1}: {sx.text(n)} is used other than as the value of one atomicAdd "
                              "(a per-block result would change meaning with the grid)")
            if any(sx.is_ident(v, b) for v in sx.walk(args[0]) for b in ("blockIdx", "threadIdx", "gridDim")):
                raise Refused(f"line {n.start_point[0] + 1}: the atomic's address {sx.text(args[0])!r} depends on the "
                              "block or thread")

    def apply(self, unit: Unit) -> Unit:
        p = self._plan(unit)
        t, ty = p.itype, p.red.ctype
        indent = sx.line_indent(unit.data, p.load.start_byte)[0].decode()
        lhs = sx.text(p.load.named_children[0].child_by_field_name("left"))
        text = (
            "{  // grid_reduce (transform): each thread folds its elements, a grid's stride apart, before the tree\n"
            f"{indent}    {ty} ptxf_a = ({ty})0;\n"
            f"{indent}    for ({t} {p.index} = {sx.text(p.init)}; {p.index} < {sx.text(p.bound)}; "
            f"{p.index} += ({t})gridDim.x * ({t})blockDim.x)\n"
            f"{indent}        ptxf_a = ptxf_a + ({ty})({sx.text(p.element)});\n"
            f"{indent}    {lhs} = ptxf_a;\n"
            f"{indent}}}"
        )
        cap = wave_blocks(unit.notes.get(FACTS_NOTE), unit.block_threads())
        grid = f"min({unit.launch.grid[0]}, {cap})" if cap is not None else unit.launch.grid[0]
        launch = LaunchConfig(grid=[grid], block=list(unit.launch.block), shared_mem=unit.launch.shared_mem)
        return unit.with_text(sx.apply_edits(unit.data, [(p.load.start_byte, p.load.end_byte, text.encode())]),
                              launch=launch, grid_cap=cap)


def _bound_of(cond: Node, index: str) -> Node | None:
    """``n`` of ``index < n`` or ``n > index``."""
    if cond is None or cond.type != "binary_expression":
        return None
    a, b = sx.unparen(cond.child_by_field_name("left")), sx.unparen(cond.child_by_field_name("right"))
    op = sx.operator(cond)
    if op == "<" and sx.is_ident(sx.uncast(a), index) and not any(sx.is_ident(v, index) for v in sx.walk(b)):
        return b
    if op == ">" and sx.is_ident(sx.uncast(b), index) and not any(sx.is_ident(v, index) for v in sx.walk(a)):
        return a
    return None
