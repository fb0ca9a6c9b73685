"""A counted ``while`` loop written as the ``for`` loop it is, before any pass reads the body.

Naive kernels sometimes count with ``while``::

    int dh = 0;                       // declared just before the loop, an integer
    while (dh < 2) {                  // dh < n or dh <= n
        ...                           // no continue (it would skip the step), dh not written
        dh++;                         // the body's last statement: ++dh, dh += 1, dh = dh + 1 too
    }                                 // dh not read after the loop

The loop passes read ``for (T j = a; j < b; j++)`` (``coarsen`` reads a short literal loop as the element's own;
``rowpar`` and ``unroll`` read counted loops), so such a loop kept them away ("a while loop in the element's code").
:func:`counted_whiles` writes it as ``for (int dh = 0; dh < 2; dh++) { ... }``: the same iterations in the same
order (the condition is tested before each, the step runs at the end of each: without ``continue`` the two forms are
one). Anything else: left as written.
"""
from __future__ import annotations

from . import syntax as sx
from .syntax import Node

INTEGER = frozenset({"int", "unsigned", "unsigned int", "long", "long long", "size_t", "int32_t", "int64_t", "uint32_t",
                     "uint64_t", "short"})


def counted_whiles(data: bytes, parse) -> bytes:
    """``data`` (a kernel definition's text) with each counted ``while`` loop written as a ``for`` (module docstring),
    one a round; ``parse(data)`` returns the parsed body (None: none)."""
    def find(d: bytes, body: Node):
        for block in sx.walk(body):
            if block.type == "compound_statement":
                stmts = sx.statements(block)
                edits = next((e for a, b in zip(stmts, stmts[1:]) for e in [_rewrite(d, a, b, stmts)] if e), None)
                if edits:
                    return edits
        return None
    return sx.rewrite_rounds(data, parse, find)


def _step(stmt: Node, v: str) -> bool:
    if stmt.type != "expression_statement" or not stmt.named_children:
        return False
    t = "".join(sx.text(stmt.named_children[0]).split())
    return t in (f"{v}++", f"++{v}", f"{v}+=1", f"{v}={v}+1")


def _rewrite(data: bytes, decl: Node, loop: Node, stmts: list[Node]) -> list[tuple[int, int, bytes]] | None:
    if decl.type != "declaration" or loop.type != "while_statement":
        return None
    ds = decl.children_by_field_name("declarator")
    ctype = sx.type_text(decl.child_by_field_name("type"))
    if len(ds) != 1 or ds[0].type != "init_declarator" or ctype not in INTEGER:
        return None
    v = sx.text(ds[0].child_by_field_name("declarator"))
    if not v.isidentifier() or ds[0].child_by_field_name("value") is None:
        return None
    cond = sx.unparen(loop.child_by_field_name("condition"))
    while cond is not None and cond.type in ("condition_clause", "parenthesized_expression") and cond.named_child_count == 1:
        cond = cond.named_children[0]
    if cond is None or cond.type != "binary_expression" or sx.operator(cond) not in ("<", "<=") \
            or not sx.is_ident(sx.unparen(cond.child_by_field_name("left")), v):
        return None
    body = loop.child_by_field_name("body")
    if body is None or body.type != "compound_statement":
        return None
    inner = sx.statements(body)
    if len(inner) < 2 or not _step(inner[-1], v) or sx.contains_type(body, ("continue_statement",)):
        return None
    if v in set().union(*(sx.written_names(s) for s in inner[:-1])) or v in sx.identifiers(cond.child_by_field_name("right")):
        return None
    after = stmts[stmts.index(loop) + 1:]
    if any(v in sx.identifiers(s) for s in after):
        return None
    text = lambda n: data[n.start_byte:n.end_byte].decode()  # noqa: E731
    head = f"for ({text(decl)[:-1].strip()}; {text(cond)}; {v}++) "
    return [(decl.start_byte, loop.start_byte, b""), (loop.start_byte, body.start_byte, head.encode()),
            (inner[-2].end_byte, inner[-1].end_byte, b"")]

