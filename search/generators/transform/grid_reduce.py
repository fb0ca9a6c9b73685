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

import re
from dataclasses import dataclass

from ptxfactory.protocol import LaunchConfig
from ptxfactory.protocol.expr import ExprError, evaluate

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
        if any(n.type == "return_statement" for n in sx.walk(body)):
            raise Refused("a return in the kernel")
        top = [c for c in body.named_children if c.type != "comment"]
        index_stmt = next((s for s in top if s.start_byte < red.loop.start_byte and _index_decl(s, shared=True)), None)
        if index_stmt is None:
            raise Refused("no index T i = blockIdx.x * blockDim.x + threadIdx.x declared before the tree")
        name, type_node, init = _index_decl(index_stmt, shared=True)
        declared = next(d.child_by_field_name("declarator") for d in index_stmt.children_by_field_name("declarator")
                        if d.type == "init_declarator" and sx.is_ident(d.child_by_field_name("declarator"), name))
        itype = sx.type_text(type_node)
        if itype not in sx.INT_TYPES or not GridStridePass()._no_overflow(unit, itype):
            raise Refused(f"the index's type {itype!r} could overflow a grid-stride loop at the spec's sizes")
        load, bound, element = self._load(top, red, aliases, name)
        if name in sx.written_names(body) or sx.identifiers(bound) & sx.written_names(body):
            raise Refused(f"the index {name!r} or the bound {sx.text(bound)!r} is written in the kernel")
        uses = [n for n in sx.walk(body) if sx.is_ident(n, name) and n != declared]
        if any(not (load.start_byte <= n.start_byte < load.end_byte) for n in uses):
            raise Refused(f"the index {name!r} is read outside the load into {red.array}")
        self._check_element(unit, element, name)
        self._check_cover(unit, bound, threads)
        self._check_writes(unit, body, red, load)
        self._check_result(unit, body, red, aliases)
        # the spec's demands last: a kernel whose shape the pass does not take says so first (a user who set
        # check.deterministic = false for it met the structural reason only then, 2026-12-05)
        check = unit.spec.check
        if red.ctype in ("float", "double") and check.rtol == 0 and check.atol == 0:
            raise Refused("a floating-point sum would be re-associated, and the spec asks for exact results (rtol = atol = 0)")
        if red.ctype in ("float", "double") and check.deterministic:
            raise Refused("a floating-point sum in another order, and the spec asks for repeatable bits (check.deterministic)")
        return _Plan(load, red, name, itype, init, bound, element)

    def _check_element(self, unit: Unit, element: Node, index: str) -> None:
        """E reads only the index, pointer and scalar parameters, literals and calls of value functions: what a thread
        computes for an element may not depend on which thread or block computes it, nor on a local (an alias of the
        index would keep the first element's value), nor write anything."""
        params = {a.name for a in unit.spec.args}
        callees = {sx.text(c.child_by_field_name("function")) for c in sx.walk(element) if c.type == "call_expression"}
        for n in sx.walk(element):
            if n.type in ("assignment_expression", "update_expression"):
                raise Refused(f"the element {sx.text(element)!r} writes ({sx.text(n)!r})")
            if sx.is_ident(n) and sx.text(n) not in params | {index} | callees:
                raise Refused(f"the element {sx.text(element)!r} reads {sx.text(n)!r}, which is neither the index nor a "
                              "parameter (a value of the thread, block or a local would change with the grid)")
            if n.type == "call_expression" and "atomic" in sx.text(n.child_by_field_name("function")):
                raise Refused(f"the element {sx.text(element)!r} calls an atomic")

    def _check_cover(self, unit: Unit, bound: Node, threads: int) -> None:
        """The original grid has a thread for every element below the bound at every spec size (a grid of 64 blocks
        summing the first 64 * B elements of a longer array would sum them all once folded)."""
        values = {a.name: a.value for a in unit.spec.args if a.role == "scalar" and a.value is not None}
        if not sx.identifiers(bound) <= set(values):
            raise Refused(f"the bound {sx.text(bound)!r} is not an expression of scalar parameters")
        expr = sx.text(bound)
        for k, v in values.items():
            expr = re.sub(rf"\b{re.escape(k)}\b", f"({v})", expr)
        for size in unit.spec.check.sizes + unit.spec.bench.sizes:
            try:
                n, blocks = int(evaluate(expr.replace("/", "//"), size)), int(evaluate(unit.launch.grid[0], size))
            except (ExprError, ValueError, TypeError):
                raise Refused(f"the bound {sx.text(bound)!r} or the grid cannot be evaluated at {dict(size)}") from None
            if blocks * threads < n:
                raise Refused(f"the grid's {blocks} x {threads} threads do not cover the {n} elements at {dict(size)}")

    def _check_writes(self, unit: Unit, body: Node, red: Reduction, load: Node) -> None:
        """The shared array is written only by the load and inside the tree (a step between them would apply to a
        thread's folded sum, not to each element); no global memory is written but by the final atomic."""
        for n in sx.walk(body):
            if n.type not in ("assignment_expression", "update_expression"):
                continue
            target = n.child_by_field_name("left") or n.child_by_field_name("argument")
            root = sx.unparen(target)
            while root is not None and root.type in ("subscript_expression", "field_expression", "pointer_expression"):
                root = sx.unparen(root.child_by_field_name("argument"))
            name = sx.text(root) if root is not None else ""
            inside = load.start_byte <= n.start_byte < load.end_byte or red.loop.start_byte <= n.start_byte < red.loop.end_byte
            if name == red.array and not inside:
                raise Refused(f"line {n.start_point[0] + 1}: {red.array} is written outside the load and the tree")
            if name in unit.pointers:
                raise Refused(f"line {n.start_point[0] + 1}: global memory written ({sx.text(n)!r}): only the final "
                              "atomic may write")

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

    def _check_result(self, unit: Unit, body: Node, red: Reduction, aliases: set[str]) -> None:
        """The kernel ends with exactly ``if (t == 0) atomicAdd(p, sh[0]);`` (``p`` a pointer parameter, or ``p + c`` /
        ``&p[c]`` with ``c`` a literal): its only atomic, ``sh[0]`` read nowhere else after the tree. Anything that
        depends on the block (a condition, a per-block address, a second atomic) would change with the grid."""
        atomics = [n for n in sx.walk(body) if (sx.call_name(n) or "").startswith("atomic")]
        if len(atomics) != 1 or sx.call_name(atomics[0]) != "atomicAdd":
            raise Refused(f"{len(atomics)} atomics in the kernel: one atomicAdd of the block's sum expected")
        call = atomics[0]
        args = sx.call_args(call)
        stmt = call.parent
        guard = stmt.parent if stmt is not None else None
        guard = guard.parent if guard is not None and guard.type == "compound_statement" and guard.named_child_count == 1 else guard
        if (len(args) != 2 or stmt is None or stmt.type != "expression_statement" or guard is None
                or guard.type != "if_statement" or guard.child_by_field_name("alternative") is not None
                or guard.parent != body or not _first_thread(guard.child_by_field_name("condition"), aliases)):
            raise Refused(f"line {call.start_point[0] + 1}: not 'if (t == 0) atomicAdd(p, {red.array}[0]);' at the "
                          "kernel's top level")
        value = sx.unparen(args[1])
        idx = [c for c in value.child_by_field_name("indices").named_children if c.type != "comment"] \
            if value is not None and value.type == "subscript_expression" else []
        if not (sx.is_ident(value.child_by_field_name("argument"), red.array) and len(idx) == 1 and sx.is_number(idx[0], 0)):
            raise Refused(f"line {call.start_point[0] + 1}: the atomic adds {sx.text(args[1])!r}, not {red.array}[0]")
        if not _fixed_address(args[0], set(unit.pointers)):
            raise Refused(f"line {call.start_point[0] + 1}: the atomic's address {sx.text(args[0])!r} is not p, p + c or "
                          "&p[c] with c a literal")
        for n in sx.walk(body):
            if n.start_byte >= red.loop.end_byte and n.type == "subscript_expression" and n != value \
                    and sx.is_ident(n.child_by_field_name("argument"), red.array):
                raise Refused(f"line {n.start_point[0] + 1}: {sx.text(n)} read after the tree other than by the atomic")

    def apply(self, unit: Unit) -> Unit:
        p = self._plan(unit)
        t, ty = p.itype, p.red.ctype
        indent = sx.line_indent(unit.data, p.load.start_byte)[0].decode()
        lhs = sx.text(p.load.named_children[0].child_by_field_name("left"))
        text = (
            "{  // grid_reduce (transform): each thread folds its elements, a grid's stride apart, before the tree\n"
            f"{indent}    {ty} ptxf_a = ({ty})0;\n"
            f"{indent}    for ({t} {p.index} = {sx.text(p.init)}; {p.index} < ({sx.text(p.bound)}); "
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


def _first_thread(cond: Node | None, aliases: set[str]) -> bool:
    """``cond`` is ``t == 0`` or ``0 == t`` (``t``: ``threadIdx.x`` or an alias of it), parentheses allowed."""
    cond = sx.unparen(sx.clause_value(cond))
    if cond is None or cond.type != "binary_expression" or sx.operator(cond) != "==":
        return False
    a, b = sx.unparen(cond.child_by_field_name("left")), sx.unparen(cond.child_by_field_name("right"))
    return (_is_tid(a, aliases) and sx.is_number(b, 0)) or (_is_tid(b, aliases) and sx.is_number(a, 0))


def _fixed_address(node: Node, pointers: set[str]) -> bool:
    """``p``, ``p + c``, ``c + p`` or ``&p[c]`` with ``p`` one of the kernel's ``pointers`` (a parameter: not a local
    that may differ between blocks) and ``c`` a literal."""
    node = sx.unparen(node)
    param = lambda n: sx.is_ident(n) and sx.text(n) in pointers  # noqa: E731
    if param(node):
        return True
    if node.type == "binary_expression" and sx.operator(node) == "+":
        a, b = sx.unparen(node.child_by_field_name("left")), sx.unparen(node.child_by_field_name("right"))
        return (param(a) and sx.is_number(b)) or (param(b) and sx.is_number(a))
    if node.type == "pointer_expression" and sx.operator(node) == "&":
        sub = sx.unparen(node.child_by_field_name("argument"))
        idx = [c for c in sub.child_by_field_name("indices").named_children if c.type != "comment"] \
            if sub is not None and sub.type == "subscript_expression" else []
        return len(idx) == 1 and param(sub.child_by_field_name("argument")) and sx.is_number(idx[0])
    return False


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
