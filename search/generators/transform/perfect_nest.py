"""A loop's guards written between it and its only inner loop moved into the inner loop, before any pass reads the body.

Naive convolutions test the kernel row before the kernel column loop::

    for (int kh = 0; kh < KH; ++kh) {
        int ih = oh * S - P + kh;                   // pure: no call, memory access, assignment or increment
        if (ih < 0 || ih >= H) continue;            // the row's guard
        for (int kw = 0; kw < KW; ++kw) { ... }     // the only statement after them
    }

The GEMM-class passes (:mod:`.smem_tile`, :mod:`.mma_tile`) read a perfect nest of loops as one k, so such a kernel
was refused ("a branch or loop inside the inner-product loop"). :func:`perfect_nests` writes it as::

    for (int kh = 0; kh < KH; ++kh) {
        for (int kw = 0; kw < KW; ++kw) {
            int ih = oh * S - P + kh;
            if (ih < 0 || ih >= H) continue;        // now skips each of the row's iterations, as it skipped the row
            ...
        }
    }

Exact: the moved statements are pure and read nothing the inner loop writes, so they have the same values at every
inner iteration, and a ``continue`` taken skips every inner iteration of that outer one, as it skipped the inner loop
(nothing follows it in the outer body); with no inner iterations neither form does anything. Taken: a ``for`` whose
body is a block of pure declarations (:func:`.opening.pure_declaration`, locals allowed) and ``if (c) continue;``
(``c`` pure, no ``else``) ending in one ``for``, where no name the moved statements declare is written, declared
again or read in the inner loop's header, and the inner loop declares or writes no name they read. Then two guards of one loop
body, ``if (c1) continue; D...; if (c2) continue;``, become one, ``D...; if ((c1) || (c2)) continue;`` (:func:`_merge`),
the form the GEMM-class passes read as a padded convolution's mask. Anything else, and a kernel with ``goto``: left
as written.
"""
from __future__ import annotations

from . import syntax as sx
from .opening import IMPURE
from .syntax import Node

MAX_ROUNDS = 8  # nest levels moved (one rewrite a round; a deeper nest keeps its outer guards)


def perfect_nests(data: bytes, parse) -> bytes:
    """``data`` (a kernel definition's text) with each loop's guards moved into its only inner loop (module
    docstring), one level a round, at most :data:`MAX_ROUNDS`; ``parse(data)`` returns the parsed body (None: none)."""
    return sx.rewrite_rounds(data, parse, lambda d, body: next(
        (e for loop in sx.walk(body) if loop.type == "for_statement" for e in [_rewrite(d, loop) or _merge(d, loop)] if e),
        None), MAX_ROUNDS)


def _pure(node: Node) -> bool:
    return not sx.contains_type(node, IMPURE) and not any(
        n.type == "type_qualifier" and sx.text(n) in ("__shared__", "volatile", "static") for n in sx.walk(node))


def _is_guard(stmt: Node) -> bool:
    """``if (c) continue;`` (or ``{ continue; }``), ``c`` pure, no ``else``."""
    if stmt.type != "if_statement" or stmt.child_by_field_name("alternative") is not None:
        return False
    then = stmt.child_by_field_name("consequence")
    inner = sx.statements(then) if then is not None and then.type == "compound_statement" else [then]
    return (len(inner) == 1 and inner[0] is not None and inner[0].type == "continue_statement"
            and _pure(stmt.child_by_field_name("condition")))


def _merge(data: bytes, loop: Node) -> list[tuple[int, int, bytes]] | None:
    """The loop body's two guards ``if (c1) continue; D...; if (c2) continue;`` (``D`` pure declarations without ``/``
    or ``%``: evaluating them where ``c1`` holds cannot trap) as ``D...; if ((c1) || (c2)) continue;``: the same
    iterations skipped, ``c2`` evaluated only where ``c1`` does not hold (``||``), the declarations' values unused
    where skipped."""
    body = loop.child_by_field_name("body")
    if body is None or body.type != "compound_statement":
        return None
    stmts = sx.statements(body)
    for i, first in enumerate(stmts):
        if not _is_guard(first):
            continue
        j = i + 1
        while j < len(stmts) and stmts[j].type == "declaration" and _pure(stmts[j]) and not _divides(stmts[j]):
            j += 1
        if j == len(stmts) or not _is_guard(stmts[j]):
            continue
        text = lambda n: data[n.start_byte:n.end_byte].decode()  # noqa: E731
        conds = [_bare(g.child_by_field_name("condition")) for g in (first, stmts[j])]
        if any(c is None for c in conds):
            continue
        indent = sx.line_indent(data, first.start_byte)[0].decode()
        moved = "".join(text(d) + "\n" + indent for d in stmts[i + 1:j])
        # joined without parentheses: a parenthesised (ih < 0 || ih >= H) reads to tree-sitter as a template argument
        # list; || binds loosest of what a condition holds here (_bare refuses ?:, commas and assignments)
        return [(first.start_byte, stmts[j].end_byte, f"{moved}if ({sx.text(conds[0])} || {sx.text(conds[1])}) continue;".encode())]
    return None


def _bare(cond: Node | None) -> Node | None:
    """An ``if``'s condition without its parentheses, or None where it is a conditional, comma or assignment
    expression (which ``||`` would bind into)."""
    while cond is not None and cond.type in ("condition_clause", "parenthesized_expression") and cond.named_child_count == 1:
        cond = cond.named_children[0]
    if cond is None or cond.type in ("conditional_expression", "comma_expression", "assignment_expression"):
        return None
    return cond


def _divides(node: Node) -> bool:
    return any(n.type == "binary_expression" and sx.operator(n) in ("/", "%") for n in sx.walk(node))


def _rewrite(data: bytes, loop: Node) -> list[tuple[int, int, bytes]] | None:
    body = loop.child_by_field_name("body")
    if body is None or body.type != "compound_statement":
        return None
    stmts = sx.statements(body)
    if len(stmts) < 2 or stmts[-1].type != "for_statement":
        return None
    moved, inner = stmts[:-1], stmts[-1]
    if not all((s.type == "declaration" and _pure(s)) or _is_guard(s) for s in moved):
        return None
    if not any(_is_guard(s) for s in moved):
        return None  # declarations alone: nothing stops the nest (the passes read them where they are)
    declared = set().union(*(sx.declared_names(s) for s in moved if s.type == "declaration"))
    read = set().union(*(sx.identifiers(s) for s in moved))
    header = [inner.child_by_field_name(f) for f in ("initializer", "condition", "update")]
    header_names = set().union(*(sx.identifiers(h) for h in header if h is not None))
    inner_body = inner.child_by_field_name("body")
    if inner_body is None:
        return None
    inner_declared = sx.declared_names(inner)
    written = sx.written_names(inner)
    if declared & (written | inner_declared | header_names) or read & (inner_declared | written):
        return None  # (a guard reading what the inner loop writes, if (acc > 10) continue;, would read it changing)
    text = lambda n: data[n.start_byte:n.end_byte].decode()  # noqa: E731
    indent = sx.line_indent(data, inner.start_byte)[0].decode() + "    "
    head = "".join(f"\n{indent}{text(s)}" for s in moved)
    if inner_body.type == "compound_statement":
        opening = inner_body.start_byte + 1  # just after its "{"
        edits = [(opening, opening, head.encode())]
    else:
        edits = [(inner_body.start_byte, inner_body.end_byte, ("{" + head + f"\n{indent}" + text(inner_body) + "\n}").encode())]
    return [(moved[0].start_byte, inner.start_byte, b"")] + edits
