"""A pointer walked through a loop written as the loop's index, before any pass reads the body.

Naive kernels often step a pointer along a strided axis instead of indexing it::

    const float* p = x + (size_t)b * D * N + n;   // declared before the loop, never written elsewhere
    for (int d = a; d < D; d++) {
        acc += *p;                                // read as *p or p[e] only
        p += N;                                   // the body's last statement: one step, the same every iteration
    }

The passes read loads as ``p[e]`` of a pointer at a known offset (:func:`.rowpar.pointer_offsets`), and a pointer
written after its declaration has none, so such a loop kept ``colpar`` and ``rowpar`` away. :func:`walked_pointers`
writes it as::

    const float* p = x + (size_t)b * D * N + n;
    for (int d = a; d < D; d++) {
        acc += p[(long long)(d - (a)) * (N)];
    }
    p += max(0LL, (long long)((D) - (a))) * (N);  // only where p is read after the loop

Exact: iteration ``d`` of the original reads ``p`` advanced ``d - a`` steps, the same element. Taken: a ``for (T d = a;
d < n; d++)`` (or ``++d``, ``d += 1``) whose body's last statement is ``p += s;`` (or ``p = p + s;``) for a pointer ``p``
declared before the loop in the same block; ``s`` and ``n`` read only names nothing in the loop writes, no calls, no
memory; ``d`` not written in the body; every other use of ``p`` in the body a ``*p`` or ``p[e]`` read, not under a ``continue`` or ``break`` (none
in the body), ``p`` not declared again in it; the loop body a block. Anything else: left as written.
"""
from __future__ import annotations

from . import syntax as sx
from .opening import IMPURE
from .rowpar import loop_head, step_one_bound
from .syntax import Node


def walked_pointers(data: bytes, parse) -> bytes:
    """``data`` (a kernel definition's text) with each walked pointer's loop written with an index (module
    docstring), one loop a round; ``parse(data)`` returns the parsed body (None: none)."""
    return sx.rewrite_rounds(data, parse, lambda d, body: next(
        (e for loop in sx.walk(body) if loop.type == "for_statement" for e in [_rewrite(d, loop)] if e), None))


def _head(loop: Node) -> tuple[str, Node, Node] | None:
    """``(d, a, n)`` of ``for (T d = a; d < n; d++)`` (:func:`.rowpar.loop_head`; ``n > d`` too, not ``<=``), else None."""
    head = loop_head(loop)
    if head is None or head[1] is None:
        return None
    bound = step_one_bound(loop.child_by_field_name("condition"), loop.child_by_field_name("update"), head[0])
    if bound is None or bound[1]:
        return None
    return head[0], head[1], bound[0]


def _step(stmt: Node, p: str) -> Node | None:
    """The stride ``s`` of ``p += s;`` or ``p = p + s;``, else None."""
    if stmt.type != "expression_statement" or not stmt.named_children:
        return None
    e = sx.unparen(stmt.named_children[0])
    if e.type != "assignment_expression" or not sx.is_ident(e.child_by_field_name("left"), p):
        return None
    right = e.child_by_field_name("right")
    if sx.operator(e) == "+=":
        return right
    r = sx.unparen(right)
    if sx.operator(e) == "=" and r.type == "binary_expression" and sx.operator(r) == "+" and sx.is_ident(sx.unparen(r.child_by_field_name("left")), p):
        return r.child_by_field_name("right")
    return None


def _rewrite(data: bytes, loop: Node) -> list[tuple[int, int, bytes]] | None:
    head = _head(loop)
    body = loop.child_by_field_name("body")
    if head is None or body is None or body.type != "compound_statement":
        return None
    d, a, n = head
    stmts = sx.statements(body)
    if len(stmts) < 2:
        return None
    p = None
    last = stmts[-1]
    if last.type == "expression_statement" and last.named_children:
        left = sx.unparen(last.named_children[0]).child_by_field_name("left")
        p = sx.text(left) if left is not None and sx.is_ident(left) else None
    stride = _step(last, p) if p else None
    if stride is None:
        return None
    written = sx.written_names(body)
    if d in written:
        return None  # the step count is d - a only where the body leaves d alone
    for e in (stride, n, a):
        if sx.contains_type(e, IMPURE) or sx.identifiers(e) & (written | {d}):
            return None
    if sx.contains_type(body, ("continue_statement", "break_statement", "return_statement")):
        return None
    if p in sx.declared_names(body) or not _declared_before(loop, p):
        return None
    edits = []
    for s in stmts[:-1]:
        for n_ in sx.walk(s):
            if not sx.is_ident(n_, p):
                continue
            parent = n_.parent
            off = f"(long long)({d} - ({sx.text(a)})) * ({sx.text(stride)})"
            if parent is not None and parent.type == "pointer_expression" and sx.operator(parent) == "*" \
                    and parent.child_by_field_name("argument") == n_:
                edits.append((parent.start_byte, parent.end_byte, f"{p}[{off}]".encode()))
            elif parent is not None and parent.type == "subscript_expression" and parent.child_by_field_name("argument") == n_:
                index = sx.subscript_index(parent)
                edits.append((index.start_byte, index.end_byte, f"{off} + ({sx.text(index)})".encode()))
            else:
                return None  # p used otherwise (passed, compared, written): left as written
    if not edits:
        return None
    edits.append((stmts[-2].end_byte, last.end_byte, b""))  # the step, and the line it stood on
    if _read_after(loop, p):
        advance = (f"\n{sx.line_indent(data, loop.start_byte)[0].decode()}{p} += max(0LL, (long long)(({sx.text(n)}) - "
                   f"({sx.text(a)}))) * ({sx.text(stride)});")
        edits.append((loop.end_byte, loop.end_byte, advance.encode()))
    return edits


def _declared_before(loop: Node, p: str) -> bool:
    """``p`` declared (as a pointer) by a statement before ``loop`` in the loop's own block."""
    block = loop.parent
    if block is None or block.type != "compound_statement":
        return False
    for s in sx.statements(block):
        if s.start_byte >= loop.start_byte:
            return False
        if s.type == "declaration" and p in sx.declared_names(s) and "*" in sx.text(s).split("=")[0]:
            return True
    return False


def _read_after(loop: Node, p: str) -> bool:
    block = loop.parent
    return any(s.start_byte > loop.start_byte and p in sx.identifiers(s) for s in sx.statements(block))
