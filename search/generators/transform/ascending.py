"""A kernel's descending counted loops written as ascending ones, before any pass reads the body.

Naive kernels walk a row backwards where the operation runs from the end (a reverse cumulative sum, a suffix
maximum, a backward recurrence)::

    for (int j = N - 1; j >= 0; --j) { acc += x[r * N + j]; y[r * N + j] = acc; }

The loop passes read ``for (T j = a; j < b; j++)`` (``scan``, ``rowpar``, ``vector_loops``, ...), so such a loop kept
them all away. :func:`ascending_loops` writes it as the same iterations in the same order over a counter that
ascends, the original variable's value recomputed from it wherever the body reads it::

    for (int j = 0; j < (N - 1) - (0) + 1; j++) { acc += x[r * N + ((N - 1) - j)]; y[r * N + ((N - 1) - j)] = acc; }

Exact: the body runs for the same values in the same order. Taken: a ``for`` whose initialiser declares one signed
integer variable ``j = hi``, whose condition is ``j >= lo`` or ``j > lo`` (either operand order), whose update is
``--j``, ``j--``, ``j -= 1`` or ``j = j - 1``, whose body neither writes ``j``, takes its address nor declares another
``j``, and whose ``hi`` and ``lo`` read only names that nothing in the loop writes (no calls, no memory: they are
evaluated once by the original, once per use here). Left as written: anything else, and a kernel with ``goto``.
"""
from __future__ import annotations

from . import syntax as sx
from .syntax import Node

SIGNED = frozenset({"int", "long", "long long", "long int", "long long int", "signed", "signed int", "short",
                    "int32_t", "int64_t", "ptrdiff_t", "Py_ssize_t", "int16_t", "int8_t"})


def ascending_loops(data: bytes, body: Node | None) -> bytes:
    """``data`` (a kernel definition's text whose parsed body is ``body``) with each descending counted loop written
    as an ascending one (module docstring); ``data`` itself when there is none. Loops nested in a rewritten loop keep
    their form (one rewrite per loop nest; a later pass reads the result again)."""
    if body is None or sx.contains_type(body, ("goto_statement", "labeled_statement")):
        return data
    edits: list[tuple[int, int, bytes]] = []
    taken: list[Node] = []
    for loop in sx.walk(body):
        if loop.type != "for_statement" or any(t.start_byte <= loop.start_byte < t.end_byte for t in taken):
            continue
        edit = _rewrite(data, loop)
        if edit is not None:
            edits += edit
            taken.append(loop)
    return sx.apply_edits(data, edits) if edits else data


def _rewrite(data: bytes, loop: Node) -> list[tuple[int, int, bytes]] | None:
    """The byte edits that make ``loop`` ascend, or None where it is not a descending counted loop (module docstring)."""
    init, cond, update = (loop.child_by_field_name(f) for f in ("initializer", "condition", "update"))
    body = loop.child_by_field_name("body")
    if init is None or cond is None or update is None or body is None or init.type != "declaration":
        return None
    decls = init.children_by_field_name("declarator")
    ctype = sx.type_text(init.child_by_field_name("type"))
    if len(decls) != 1 or decls[0].type != "init_declarator" or ctype not in SIGNED:
        return None
    var = sx.text(decls[0].child_by_field_name("declarator"))
    hi = decls[0].child_by_field_name("value")
    if not var.isidentifier() or hi is None:
        return None
    lo, inclusive = _lower_bound(sx.clause_value(cond), var)
    if lo is None or not _is_decrement(update, var):
        return None
    written = sx.written_names(body)
    if var in written or var in sx.declared_names(body):
        return None
    for bound in (hi, lo):
        if sx.contains_type(bound, ("call_expression", "subscript_expression", "pointer_expression", "field_expression",
                                    "assignment_expression", "update_expression", "comma_expression")):
            return None
        if sx.identifiers(bound) & (written | {var}):
            return None
    h, lo_text = sx.text(hi), sx.text(lo)
    count = f"({h}) - ({lo_text})" + (" + 1" if inclusive else "")
    uses = [n for n in sx.walk(body) if n.type == "identifier" and sx.text(n) == var]
    edits = [(hi.start_byte, hi.end_byte, b"0"),
             (cond.start_byte, cond.end_byte, f"{var} < {count}".encode()),
             (update.start_byte, update.end_byte, f"{var}++".encode())]
    edits += [(n.start_byte, n.end_byte, f"(({h}) - {var})".encode()) for n in uses]
    return edits


def _lower_bound(cond: Node | None, var: str) -> tuple[Node | None, bool]:
    """``(lo, inclusive)`` of ``var >= lo`` / ``var > lo`` (or ``lo <= var`` / ``lo < var``), else ``(None, False)``."""
    cond = sx.unparen(cond)
    if cond is None or cond.type != "binary_expression":
        return None, False
    op = sx.operator(cond)
    left, right = cond.child_by_field_name("left"), cond.child_by_field_name("right")
    if sx.is_ident(sx.unparen(left), var) and op in (">=", ">"):
        return right, op == ">="
    if sx.is_ident(sx.unparen(right), var) and op in ("<=", "<"):
        return left, op == "<="
    return None, False


def _is_decrement(update: Node, var: str) -> bool:
    """``--var``, ``var--``, ``var -= 1`` or ``var = var - 1``."""
    u = sx.unparen(update)
    if u.type == "update_expression":
        return sx.is_ident(sx.unparen(u.child_by_field_name("argument")), var) and "--" in sx.text(u)
    if u.type != "assignment_expression" or not sx.is_ident(sx.unparen(u.child_by_field_name("left")), var):
        return False
    right = sx.unparen(u.child_by_field_name("right"))
    if sx.operator(u) == "-=":
        return sx.is_number(right, 1)
    return (sx.operator(u) == "=" and right.type == "binary_expression" and sx.operator(right) == "-"
            and sx.is_ident(sx.unparen(right.child_by_field_name("left")), var)
            and sx.is_number(right.child_by_field_name("right"), 1))
