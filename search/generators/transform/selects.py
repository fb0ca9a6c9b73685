"""An ``if``/``else`` whose two branches assign one place written as one assignment of a conditional expression.

Naive kernels often choose a value with a statement::

    if (v > 0.0f) y[i] = v;                 // or { y[i] = v; }
    else y[i] = alpha * v;                  // the same place, the same operator (=, +=, ...)

    if (t > 0.0f) r = t * logf(t); else if (t == 0.0f) r = 0.0f; else r = -1.0f;

:func:`if_selects` writes them as ``y[i] = (v > 0.0f) ? (v) : (alpha * v);`` (an ``else if`` chain nests, innermost
first). The passes that take straight-line element code (``vectorize``, ``coarsen``, ``vectorize_x``) then read one
top-level store where they refused "a branch in the element's code". Exact: the condition is evaluated once, then
exactly one of the two values, as before; the place assigned is the same expression, evaluated once (it must have no
side effects: no assignment, increment or call in it). Anything else (branches of several statements, different
places or operators, a branch without ``else``, a declaration) is left as written.
"""
from __future__ import annotations

from . import syntax as sx
from .syntax import Node

ASSIGN_OPS = frozenset({"=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>="})


def if_selects(data: bytes, parse) -> bytes:
    """``data`` (a kernel definition's text) with each ``if``/``else`` of one assignment to one place a branch written
    as one assignment of a conditional expression (module docstring), one a round, innermost first; ``parse(data)``
    returns the parsed body (None: none)."""
    def find(d: bytes, body: Node):
        for node in sx.walk(body):
            if node.type == "if_statement":
                edit = _rewrite(d, node)
                if edit is not None:
                    return [edit]
        return None
    return sx.rewrite_rounds(data, parse, find)


def _assignment(stmt: Node | None) -> Node | None:
    """The assignment expression of ``stmt`` (an expression statement, or a block holding only one), else None."""
    while stmt is not None and stmt.type == "compound_statement":
        inner = [c for c in stmt.named_children if c.type != "comment"]
        if len(inner) != 1:
            return None
        stmt = inner[0]
    if stmt is None or stmt.type != "expression_statement":
        return None
    e = [c for c in stmt.named_children if c.type != "comment"]
    if len(e) != 1 or e[0].type != "assignment_expression" or sx.operator(e[0]) not in ASSIGN_OPS:
        return None
    return e[0]


def _pure(node: Node) -> bool:
    """``node`` has no side effect: no assignment, increment, call or comma in it."""
    return not any(n.type in ("assignment_expression", "update_expression", "call_expression", "comma_expression")
                   for n in sx.walk(node))


def _rewrite(data: bytes, node: Node) -> tuple[int, int, bytes] | None:
    cond = node.child_by_field_name("condition")
    then = _assignment(node.child_by_field_name("consequence"))
    alt = node.child_by_field_name("alternative")
    if alt is not None and alt.type == "else_clause":
        alt = next((c for c in alt.named_children if c.type != "comment"), None)
    other = _assignment(alt)
    if cond is None or then is None or other is None or sx.contains_type(cond, ("declaration",)) \
            or any(sx.text(ch) == "constexpr" for ch in node.children):
        return None
    left, op = then.child_by_field_name("left"), sx.operator(then)
    norm = lambda n: "".join(sx.text(n).split())  # noqa: E731
    if op != sx.operator(other) or norm(left) != norm(other.child_by_field_name("left")) or not _pure(left):
        return None
    text = lambda n: data[n.start_byte:n.end_byte].decode()  # noqa: E731
    c = sx.unparen(cond)
    while c is not None and c.type == "condition_clause" and c.named_child_count == 1:
        c = sx.unparen(c.named_children[0])
    if c is None:
        return None
    value = f"({text(c)}) ? ({text(then.child_by_field_name('right'))}) : ({text(other.child_by_field_name('right'))})"
    return node.start_byte, node.end_byte, f"{text(left)} {op} {value};".encode()
