"""A kernel's opening put in the order the passes read, before any pass reads the body.

Naive kernels often open with their accumulators, or declare the guard's bound between the index and the guard::

    float best = -1e30f;                              // pure: literals and scalar parameters only
    int Ho = H / 2, Wo = W / 2;
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    int total = N * C * Ho * Wo;                      // pure, read by the guard
    if (r >= total) return;
    for (...) best = fmaxf(best, x[...]);

The openings the passes read (:mod:`.opening`, :mod:`.smem_tile`) start at the index and go straight to the guard, so
such a kernel is refused ("not one thread per row"). :func:`sink_declarations` rewrites it as::

    int Ho = H / 2, Wo = W / 2;                       // pure, read by the guard (through total): before the index
    int total = N * C * Ho * Wo;
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= total) return;
    float best = -1e30f;                              // pure, read by nothing up to the guard: after it
    for (...) ...

(with ``if (r < M) { ... }``: the moved declarations open the guarded block). It is exact: a pure declaration reads
only literals, scalar parameters and other pure declarations, which nothing before the guard writes, so it has the
same value anywhere up to its first use, and a thread that leaves at the guard never used it. Pure: a declaration
without a call, memory access (subscript, ``*``, ``->``, ``.``), assignment, increment, ``__shared__``/``volatile``/
``static`` or array declarator, and without ``threadIdx``/``blockIdx``/``blockDim``/``gridDim`` or a name declared
from them. Every statement up to the first ``if`` (the guard) must be a declaration, the first one not pure must
name a builtin, none may write a variable it does not declare, and the guard is a bare ``if (...) return;`` or an
``if (...) { ... }`` without ``else`` that is the last statement (or followed only by a bare ``return;``). Anything
else: the text is returned unchanged. Comments between the moved statements are dropped (the kernel's own text is
not changed; only the candidates' is).
"""
from __future__ import annotations

from . import syntax as sx
from .opening import BUILTINS, is_bare_return, pure_declaration as _pure
from .syntax import Node

def sink_declarations(data: bytes, body: Node | None) -> bytes:
    """``data`` (a kernel definition's text whose parsed body is ``body``) with its opening put in the order the passes
    read (module docstring): pure declarations before the index that nothing up to the guard reads moved after the
    guard; pure declarations between the index and the guard that do not depend on the index moved before it.
    ``data`` itself when nothing moves or the shape is not the one described."""
    if body is None:
        return data
    stmts = sx.statements(body)
    k = 0
    while k < len(stmts) and _pure(stmts[k]):
        k += 1
    if k >= len(stmts) or not (sx.identifiers(stmts[k]) & BUILTINS):
        return data
    g = next((j for j in range(k, len(stmts)) if stmts[j].type == "if_statement"), None)
    if g is None or any(s.type != "declaration" for s in stmts[k:g]):
        return data
    guard = stmts[g]
    if guard.child_by_field_name("alternative") is not None:
        return data
    if any(sx.written_names(s) - sx.declared_names(s) for s in stmts[:g]):  # (int j = n++;): the order would matter
        return data
    # the declarations up to the guard: what depends on the thread (builtins, or names declared from them) stays in
    # order after the pure ones; a pure one that the thread's declarations or the guard read (directly or through
    # another that stays) goes before the index, any other after the guard
    per_thread, pure, thread_names = [], [], set()
    for i, s in enumerate(stmts[:g]):
        if i >= k and ((sx.identifiers(s) & (BUILTINS | thread_names)) or not _pure(s)):
            per_thread.append(s)
            thread_names |= sx.declared_names(s)
        else:
            pure.append(s)
    read = set().union(*(sx.identifiers(s) for s in per_thread)) | sx.identifiers(guard.child_by_field_name("condition"))
    stay_ids = set()
    for s in reversed(pure):
        if sx.declared_names(s) & read:
            stay_ids.add(s.id)
            read |= sx.identifiers(s)
    stay = [s for s in pure if s.id in stay_ids]
    moved = [s for s in pure if s.id not in stay_ids]
    if [s.id for s in stay + per_thread] == [s.id for s in stmts[:g]]:
        return data
    cons = guard.child_by_field_name("consequence")
    indent, _ = sx.line_indent(data, stmts[k].start_byte)
    ind = indent.decode()
    head = "\n".join(sx.text(s) if i == 0 else ind + sx.text(s) for i, s in enumerate(stay + per_thread))
    first = stmts[0]
    if not moved:
        return sx.apply_edits(data, [(first.start_byte, guard.start_byte, (head + "\n" + ind).encode())])
    if is_bare_return(cons):
        tail = "\n".join(ind + sx.text(s) for s in moved)
        return sx.apply_edits(data, [(first.start_byte, guard.start_byte, (head + "\n" + ind).encode()),
                                     (guard.end_byte, guard.end_byte, ("\n" + tail).encode())])
    if cons.type == "compound_statement" and (g == len(stmts) - 1 or (g == len(stmts) - 2 and is_bare_return(stmts[-1]))):
        inner = sx.statements(cons)
        if not inner:
            return data
        pad, _ = sx.line_indent(data, inner[0].start_byte)
        block = "\n".join(sx.text(s) for s in moved).replace("\n", "\n" + pad.decode()) + "\n" + pad.decode()
        return sx.apply_edits(data, [(first.start_byte, guard.start_byte, (head + "\n" + ind).encode()),
                                     (inner[0].start_byte, inner[0].start_byte, block.encode())])
    return data
