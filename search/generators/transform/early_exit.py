"""A kernel's early exits written as ``else`` branches, before any pass reads the body.

Naive kernels often finish a special case and leave::

    if (z == 0 || z == Z - 1 || x == 0 || x == X - 1) {   // the boundary: a copy
        out[idx] = u[idx];
        return;
    }
    out[idx] = c0 * u[idx] + c1 * (...);                 // the interior

A ``return`` in an element's code stops the passes that run that code several times in one thread (``grid_stride``'s
loop, ``coarsen``'s K elements: it would leave the loop), though the kernel means "this element is done".
:func:`else_for_early_exits` writes it as::

    if (z == 0 || ...) {
        out[idx] = u[idx];
    } else {
        out[idx] = c0 * u[idx] + c1 * (...);
    }

Exact: the ``if`` is a statement of the kernel's body itself (or of an ``else`` block made so, which ends the body
too), its block ends with a bare ``return;`` and holds no other ``return``, so the statements after it ran exactly
when the block did not. Taken: an ``if`` without ``else`` whose block has at least one statement before the
``return`` (a bare ``if (...) return;`` or ``{ return; }`` is a guard, which the openings read as it is) and is
followed by at least one statement. Left as written: a kernel with ``goto`` or a label. Comments stay where they are.
"""
from __future__ import annotations

from . import syntax as sx
from .syntax import Node


def else_for_early_exits(data: bytes, body: Node | None) -> bytes:
    """``data`` (a kernel definition's text whose parsed body is ``body``) with each early exit of its body, an ``if``
    block ending in ``return;`` followed by more statements, rewritten as ``if (...) {...} else {...rest...}`` (module
    docstring); ``data`` itself when there is none."""
    if body is None or sx.contains_type(body, ("goto_statement", "labeled_statement")):
        return data
    edits: list[tuple[int, int, bytes]] = []
    closes = 0
    stmts = sx.statements(body)
    while True:
        k = next((i for i, s in enumerate(stmts[:-1]) if _early_exit(s)), None)
        if k is None:
            break
        node = stmts[k]
        block = node.child_by_field_name("consequence")
        ret = sx.statements(block)[-1]
        start = ret.start_byte
        while start > 0 and data[start - 1:start] in (b" ", b"\t"):
            start -= 1
        if start > 0 and data[start - 1:start] == b"\n":
            start -= 1
        edits.append((start, ret.end_byte, b""))
        edits.append((node.end_byte, node.end_byte, b" else {"))
        closes += 1
        stmts = stmts[k + 1:]
    if not closes:
        return data
    ind = sx.line_indent(data, stmts[0].start_byte)[0].decode() if stmts else "    "
    close = body.end_byte - 1  # the body's closing brace
    edits.append((close, close, f"{ind}}}\n".encode() * closes))
    return sx.apply_edits(data, sorted(edits))


def _early_exit(stmt: Node) -> bool:
    """``if (...) { ...; return; }``: no else, a compound block of 2+ statements ending in a bare return, no other return."""
    if stmt.type != "if_statement" or stmt.child_by_field_name("alternative") is not None:
        return False
    block = stmt.child_by_field_name("consequence")
    if block is None or block.type != "compound_statement":
        return False
    inner = sx.statements(block)
    if len(inner) < 2 or inner[-1].type != "return_statement" or inner[-1].named_child_count:
        return False
    return not any(n.type == "return_statement" for s in inner[:-1] for n in sx.walk(s))
