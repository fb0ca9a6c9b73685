"""An ``if``/``else`` whose two branches assign one place written as one assignment of a conditional expression.

Naive kernels often choose a value with a statement::

    if (v > 0.0f) y[i] = v;                 // or { y[i] = v; }
    else y[i] = alpha * v;                  // the same place, plain =

    if (t > 0.0f) r = t * logf(t); else if (t == 0.0f) r = 0.0f; else r = -1.0f;

:func:`if_selects` writes them as ``y[i] = (v > 0.0f) ? (float)(v) : (float)(alpha * v);`` (an ``else if`` chain
nests, innermost first). The passes that take straight-line element code (``vectorize``, ``coarsen``, ``vectorize_x``)
then read one top-level store where they refused "a branch in the element's code". Exact: the condition is evaluated
once, then exactly one of the two values, as before, each converted to the place's type as its assignment converted
it (a conditional expression's operands would otherwise meet in their common type first: an ``unsigned`` branch
would turn the other's ``-1`` into 4294967295, and ``__half`` against ``float`` does not compile); the place assigned
is the same expression, evaluated once (no assignment, increment or call in it). The place's type must be known and
scalar (an integer, float, double, bool, ``__half`` or ``__nv_bfloat16``): a local or parameter declared once with it,
or an element of a pointer or array declared once. Anything
else (compound assignments, whose arithmetic would meet the values' types differently; branches of several
statements; different places; a branch without ``else``; a condition with an init statement; a braced value; an
unknown type) is left as written.
"""
from __future__ import annotations

from . import syntax as sx
from .syntax import Node

SCALAR_TYPES = sx.INT_TYPES | frozenset({"float", "double", "bool", "__half", "half", "__nv_bfloat16", "nv_bfloat16"})
ASSIGN_OPS = frozenset({"=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>="})  # (only = is rewritten)


def if_selects(data: bytes, parse) -> bytes:
    """``data`` (a kernel definition's text) with each ``if``/``else`` of one assignment to one place a branch written
    as one assignment of a conditional expression (module docstring), one a round, innermost first; ``parse(data)``
    returns the parsed body (None: none)."""
    def find(d: bytes, body: Node):
        fn = body.parent
        types = sx.Types(fn) if fn is not None else None
        for node in sx.walk(body):
            if node.type == "if_statement" and types is not None:
                edit = _rewrite(d, node, types)
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


def _place_type(left: Node, types: sx.Types) -> str | None:
    """The type of the place ``left`` (a name, or an element ``p[i]`` of a pointer or array), None when unknown."""
    left = sx.unparen(left)
    if sx.is_ident(left):
        t = types.scalar.get(sx.text(left))
    elif left is not None and left.type == "subscript_expression" and sx.is_ident(sx.unparen(left.child_by_field_name("argument"))):
        t = types.element.get(sx.text(sx.unparen(left.child_by_field_name("argument"))))
    else:
        return None
    if not t or t not in SCALAR_TYPES:
        return None  # (a class type's assignment may be its own operator=, which a cast then a copy would not call)
    return t


def _rewrite(data: bytes, node: Node, types: sx.Types) -> tuple[int, int, bytes] | None:
    cond = node.child_by_field_name("condition")
    then = _assignment(node.child_by_field_name("consequence"))
    alt = node.child_by_field_name("alternative")
    if alt is not None and alt.type == "else_clause":
        alt = next((c for c in alt.named_children if c.type != "comment"), None)
    other = _assignment(alt)
    if cond is None or then is None or other is None or any(sx.text(ch) == "constexpr" for ch in node.children):
        return None
    if cond.type == "condition_clause" and (cond.child_by_field_name("initializer") is not None
                                            or len([c for c in cond.named_children if c.type != "comment"]) != 1):
        return None  # an init statement (if (t = f(); t > 0)) or a declaration (if (int k = ...))
    left = then.child_by_field_name("left")
    norm = lambda n: "".join(sx.text(n).split())  # noqa: E731
    if sx.operator(then) != "=" or sx.operator(other) != "=" or norm(left) != norm(other.child_by_field_name("left")) \
            or not _pure(left):
        return None
    ctype = _place_type(left, types)
    values = [then.child_by_field_name("right"), other.child_by_field_name("right")]
    if ctype is None or any(v is None or v.type == "initializer_list" for v in values):
        return None
    text = lambda n: data[n.start_byte:n.end_byte].decode()  # noqa: E731
    c = cond.named_children[0] if cond.type == "condition_clause" else cond
    c = sx.unparen(c)
    if c is None or c.type == "declaration":
        return None
    a, b = (f"({ctype})({text(v)})" for v in values)
    return node.start_byte, node.end_byte, f"{text(left)} = ({text(c)}) ? {a} : {b};".encode()
