"""``unroll``: ``#pragma unroll`` on loops with a compile-time trip count, ``#pragma unroll 4`` on thread-strided loops.

A loop ``for (int k = A; k < B; k += C)`` with integer literals A, B, C, at most 32 iterations and ``k``
not written in its body is unrolled fully. A thread-strided loop (``i += blockDim.x``, or any step
naming ``blockDim``/``gridDim``: the main loop of a block reduction or a grid-stride loop; or a loop
``rowpar`` split across lanes: it starts at ``ptxf_lane`` and steps by the lanes per row) whose body
has no barrier, no nested loop and no ``break``/``return``/``goto`` gets ``#pragma unroll 4``: four
iterations' loads can be in flight at once. Exact: unrolling never reorders floating-point operations
(each iteration's statements run in the same order).
"""
from __future__ import annotations

from . import syntax as sx
from .base import Unit
from .syntax import Node

MAX_FULL_UNROLL = 32  # iterations; more would bloat code for little gain
STRIDED_UNROLL = 4


class UnrollPass:
    """``#pragma unroll`` (fixed trip count) / ``#pragma unroll 4`` (thread-strided loop) on loops without a pragma."""

    name = "unroll"
    group = None
    exact = True

    def _targets(self, unit: Unit) -> list[tuple[Node, str]]:
        if unit.body is None:
            return []
        out = []
        for loop in sx.walk(unit.body):
            if loop.type != "for_statement" or loop.parent is None or loop.parent.type != "compound_statement":
                continue
            if _has_pragma(loop):
                continue
            if _constant_trip_count(loop) is not None:
                out.append((loop, "#pragma unroll"))
            elif _thread_strided(loop):
                out.append((loop, f"#pragma unroll {STRIDED_UNROLL}"))
        return out

    def applies(self, unit: Unit) -> bool:
        return bool(self._targets(unit))

    def apply(self, unit: Unit) -> Unit:
        edits = []
        for loop, pragma in self._targets(unit):
            indent, alone = sx.line_indent(unit.data, loop.start_byte)
            rep = (b"" if alone else b"\n" + indent) + pragma.encode() + b"\n" + indent
            edits.append((loop.start_byte, loop.start_byte, rep))
        return unit.with_text(sx.apply_edits(unit.data, edits))


def _has_pragma(loop: Node) -> bool:
    prev = loop.prev_named_sibling
    while prev is not None and prev.type == "comment":
        prev = prev.prev_named_sibling
    return prev is not None and prev.type == "preproc_call" and sx.text(prev.child_by_field_name("directive")) == "#pragma"


def _loop_var(loop: Node) -> tuple[str, Node] | None:
    """``(name, initial value)`` of ``for (int k = A; ...)`` / ``for (k = A; ...)``."""
    init = loop.child_by_field_name("initializer")
    if init is None:
        return None
    if init.type == "declaration":
        ds = init.children_by_field_name("declarator")
        if len(ds) == 1 and ds[0].type == "init_declarator" and sx.is_ident(ds[0].child_by_field_name("declarator")):
            return sx.text(ds[0].child_by_field_name("declarator")), ds[0].child_by_field_name("value")
    if init.type == "assignment_expression" and sx.operator(init) == "=" and sx.is_ident(init.child_by_field_name("left")):
        return sx.text(init.child_by_field_name("left")), init.child_by_field_name("right")
    return None


def _int(node: Node | None) -> int | None:
    node = sx.unparen(node)
    if node is not None and node.type == "unary_expression" and sx.operator(node) == "-":
        v = _int(node.child_by_field_name("argument"))
        return -v if v is not None else None
    if node is None or node.type != "number_literal":
        return None
    v = sx.literal_value(node)
    return v if isinstance(v, int) else None


def _constant_trip_count(loop: Node) -> int | None:
    """The iteration count of ``for (k = A; k <op> B; k += C)`` with literal A, B, C (1..MAX_FULL_UNROLL), else None."""
    var = _loop_var(loop)
    cond, upd, body = loop.child_by_field_name("condition"), loop.child_by_field_name("update"), loop.child_by_field_name("body")
    if var is None or cond is None or upd is None or body is None:
        return None
    name, start = var[0], _int(var[1])
    if start is None or name in sx.written_names(body):
        return None
    step = None
    if upd.type == "update_expression" and sx.is_ident(upd.child_by_field_name("argument"), name):
        step = 1 if sx.operator(upd) == "++" else -1
    elif upd.type == "assignment_expression" and sx.is_ident(upd.child_by_field_name("left"), name) and sx.operator(upd) in ("+=", "-="):
        c = _int(upd.child_by_field_name("right"))
        step = None if c is None else (c if sx.operator(upd) == "+=" else -c)
    if not step or cond.type != "binary_expression" or not sx.is_ident(cond.child_by_field_name("left"), name):
        return None
    bound, op = _int(cond.child_by_field_name("right")), sx.operator(cond)
    if bound is None:
        return None
    count, k = 0, start
    ok = {"<": lambda a: a < bound, "<=": lambda a: a <= bound, ">": lambda a: a > bound, ">=": lambda a: a >= bound,
          "!=": lambda a: a != bound}.get(op)
    if ok is None:
        return None
    while ok(k):
        count += 1
        k += step
        if count > MAX_FULL_UNROLL:
            return None
    return count or None


def _thread_strided(loop: Node) -> bool:
    var, upd, body = _loop_var(loop), loop.child_by_field_name("update"), loop.child_by_field_name("body")
    while upd is not None and upd.type == "comma_expression":  # k += S, then what rides along (divmod's carries)
        upd = upd.child_by_field_name("left")
    if var is None or upd is None or body is None or loop.child_by_field_name("condition") is None:
        return False
    if upd.type != "assignment_expression" or sx.operator(upd) != "+=" or not sx.is_ident(upd.child_by_field_name("left"), var[0]):
        return False
    init = loop.child_by_field_name("initializer")
    split = init is not None and "ptxf_lane" in sx.identifiers(init) and sx.is_number(upd.child_by_field_name("right"))
    if not ({"blockDim", "gridDim"} & sx.identifiers(upd.child_by_field_name("right"))) and not split:
        return False
    if var[0] in sx.written_names(body):
        return False
    return not (
        sx.contains_call(body, sx.BARRIERS)
        or sx.contains_type(body, sx.LOOPS + ("break_statement", "return_statement", "goto_statement", "continue_statement"))
    )
