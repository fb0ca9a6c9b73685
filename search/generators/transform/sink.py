"""Declarations written before a kernel's thread index moved to just after its guard, before any pass reads the body.

Naive kernels often open with their accumulators::

    float best = -1e30f;                              // pure: literals and scalar parameters only
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M) return;
    for (...) best = fmaxf(best, x[...]);

The openings the passes read (:mod:`.opening`, :mod:`.smem_tile`) start at the index, so such a kernel is refused
("not one thread per row"). :func:`sink_declarations` rewrites it as::

    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M) return;
    float best = -1e30f;
    for (...) ...

(with ``if (r < M) { ... }``: the declarations open the guarded block). It is exact: a declaration that reads only
literals and scalar parameters has the same value after the guard, and a thread that leaves at the guard never
used it. What it moves: the declarations at the start of the body, before the first statement that names
``threadIdx``/``blockIdx``/``blockDim``/``gridDim``, that have no call, memory access (subscript, ``*``, ``->``),
assignment or ``__shared__``/``static``/array declarator, and whose names are not read by the statements from there
to the guard (the index, its aliases, the guard's condition). The first ``if`` after them must be the guard: a bare
``if (...) return;`` or an ``if (...) { ... }`` with no ``else`` that is the last statement (or followed only by a
bare ``return;``). Anything else: the text is returned unchanged.
"""
from __future__ import annotations

from . import syntax as sx
from .opening import BUILTINS, is_bare_return
from .syntax import Node

_IMPURE = ("call_expression", "subscript_expression", "pointer_expression", "field_expression", "assignment_expression",
           "update_expression", "array_declarator", "storage_class_specifier", "lambda_expression")


def _pure(stmt: Node) -> bool:
    if stmt.type != "declaration" or sx.contains_type(stmt, _IMPURE):
        return False
    if any(n.type == "type_qualifier" and sx.text(n) in ("__shared__", "volatile") for n in sx.walk(stmt)):
        return False
    return not (sx.identifiers(stmt) & BUILTINS)


def sink_declarations(data: bytes, body: Node | None) -> bytes:
    """``data`` (a kernel definition's text whose parsed body is ``body``) with the pure declarations that precede its
    thread index moved to just after its guard (module docstring); ``data`` itself when there are none or the
    shape is not the one described."""
    if body is None:
        return data
    stmts = sx.statements(body)
    k = 0
    while k < len(stmts) and _pure(stmts[k]):
        k += 1
    leads = stmts[:k]
    if not leads or k >= len(stmts) or not (sx.identifiers(stmts[k]) & BUILTINS):
        return data
    g = next((j for j in range(k, len(stmts)) if stmts[j].type == "if_statement"), None)
    if g is None or any(s.type != "declaration" for s in stmts[k:g]):
        return data
    declared = set().union(*(sx.declared_names(s) for s in leads))
    guard = stmts[g]
    cond = guard.child_by_field_name("condition")
    if any(sx.identifiers(s) & declared for s in stmts[k:g]) or sx.identifiers(cond) & declared:
        return data
    if guard.child_by_field_name("alternative") is not None:
        return data
    cons = guard.child_by_field_name("consequence")
    moved = "\n".join(sx.text(s) for s in leads)
    indent, _ = sx.line_indent(data, stmts[k].start_byte)
    removal = (leads[0].start_byte, stmts[k].start_byte, b"")
    if is_bare_return(cons):
        insert = (guard.end_byte, guard.end_byte, ("\n" + "\n".join(indent.decode() + sx.text(s) for s in leads)).encode())
    elif cons.type == "compound_statement" and (g == len(stmts) - 1 or (g == len(stmts) - 2 and is_bare_return(stmts[-1]))):
        inner = sx.statements(cons)
        if not inner:
            return data
        pad, _ = sx.line_indent(data, inner[0].start_byte)
        insert = (inner[0].start_byte, inner[0].start_byte, (moved.replace("\n", "\n" + pad.decode()) + "\n" + pad.decode()).encode())
    else:
        return data
    return sx.apply_edits(data, [removal, insert])
