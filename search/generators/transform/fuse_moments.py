"""``fuse_moments``: a sum loop, then a loop summing squared deviations from a value computed between them, becomes
one Welford loop over the elements.

Pattern (the statistics of a naive LayerNorm, InstanceNorm, GroupNorm or BatchNorm: a mean pass, then a variance pass,
in one block of statements)::

    T s = s0;                                   // declared before the first loop
    for (I j = a; j < n; j++) s += E(j);        // or { T v = E(j); s += v; }
    ...                                         // statements without loops: m from s (m = s / N), ...
    T q = q0;                                   // declared before the second loop
    for (I k = a; k < n; k++) {                 // the same bounds
        T d = E(k) - m;  q += d * d;            // or q += (E(k) - m) * (E(k) - m);
    }

becomes (the elements read once; the count, mean and sum of squared deviations from the mean, Welford's, of what the
first loop summed)::

    int ptxf_wn = 0;  T ptxf_wmu = 0, ptxf_wm2 = 0;
    for (I j = a; j < n; j++) {
        T ptxf_wx = E(j); ptxf_wn += 1; T ptxf_wd = ptxf_wx - ptxf_wmu;
        ptxf_wmu += ptxf_wd / ptxf_wn; ptxf_wm2 += ptxf_wd * (ptxf_wx - ptxf_wmu);
    }
    s += ptxf_wmu * ptxf_wn;                                     // the sum
    ...
    q += ptxf_wm2 + ptxf_wn * (ptxf_wmu - m) * (ptxf_wmu - m);   // sum (x - m)^2 = M2 + n (mean - m)^2, for any m

the Welford form :mod:`.reductions` recognises, so ``rowpar`` (and ``rowpar_cluster``) splits the loop over lanes and
merges the lanes' parts (Chan's merge), and ``vector_loops`` widens it. Where a row is too long for ``hold_row``'s
registers (a sample's whole C x H x W, a channel's N x H x W) the input is read once for the statistics instead of
twice. The identity holds for any ``m``: whatever the code between the loops computes from ``s``. Not bit-identical
(rounding): refused when the spec asks for exact results. Optional (group ``moments``, proposed with and without) and
unproven (its chains follow the ones without it until a GPU has timed it).

Refused (left alone) when: the loops are not in one block, their bounds or starts differ, or a loop sits between them;
``E`` differs between the loops, writes anything, calls anything but a pure math function or a load, or reads ``s``,
``q``, ``m`` or a buffer the kernel writes; a name ``E`` reads is written between the loops; ``m`` is written in the
second loop or is not a name; ``s`` or ``q`` is written or read elsewhere in the loops, or is not a local declared
before its loop with a float or double type (both one type); an integer sum.
"""
from __future__ import annotations

import re

from . import syntax as sx
from .base import Unit
from .online_softmax import _body_stmt, _for_header, _norm, _pure, _renamed, _written_buffers, first_fusion
from .rowpar import PlannedPass, Refused
from .syntax import Node

FLOATS = frozenset({"float", "double"})


def _local_value(stmts: list[Node]) -> tuple[list[Node], tuple[str, Node] | None]:
    """A body ``T v = E; rest`` as ``(rest, (v, E))``; else ``(stmts, None)``."""
    if len(stmts) >= 2 and stmts[0].type == "declaration":
        ds = [c for c in stmts[0].children if c.type == "init_declarator"]
        if len(ds) == 1 and ds[0].child_by_field_name("value") is not None and sx.is_ident(ds[0].child_by_field_name("declarator")):
            return stmts[1:], (sx.text(ds[0].child_by_field_name("declarator")), ds[0].child_by_field_name("value"))
    return stmts, None


def _accumulation(st: Node) -> tuple[str, Node] | None:
    """``(s, term)`` of ``s += term;`` or ``s = s + term;``, else None."""
    if st.type != "expression_statement" or not st.named_children:
        return None
    a = sx.unparen(st.named_children[0])
    if a is None or a.type != "assignment_expression" or not sx.is_ident(sx.unparen(a.child_by_field_name("left"))):
        return None
    s = sx.text(sx.unparen(a.child_by_field_name("left")))
    if sx.operator(a) == "+=":
        return s, sx.unparen(a.child_by_field_name("right"))
    r = sx.unparen(a.child_by_field_name("right"))
    if sx.operator(a) == "=" and r is not None and r.type == "binary_expression" and sx.operator(r) == "+" \
            and sx.is_ident(sx.unparen(r.child_by_field_name("left")), s):
        return s, sx.unparen(r.child_by_field_name("right"))
    return None


def _nest(loop: Node) -> list[Node]:
    """The loops of a perfect nest from ``loop`` down (each body exactly one ``for`` loop, the last's anything)."""
    out = [loop]
    while True:
        body = _body_stmt(out[-1])
        if len(body) != 1 or body[0].type != "for_statement":
            return out
        out.append(body[0])


def _innermost_accumulation(loop: Node) -> tuple[str, Node, tuple[str, Node] | None] | None:
    """``(acc, term, local)`` of the innermost loop of the nest from ``loop`` whose body is ``[T v = E;] acc += term;``
    (``local`` the ``(v, E)`` declared first, or None), else None."""
    body, local = _local_value(_body_stmt(_nest(loop)[-1]))
    acc = _accumulation(body[0]) if len(body) == 1 else None
    return None if acc is None else (*acc, local)


def _sum_loop(loop: Node) -> tuple[str, Node] | None:
    """``(s, E)`` of a loop (the innermost of a perfect nest) whose body is ``s += E;`` (or ``T v = E; s += v;``), else
    None."""
    found = _innermost_accumulation(loop)
    if found is None:
        return None
    s, term, local = found
    if local is not None:
        return (s, local[1]) if sx.is_ident(term, local[0]) else None
    return s, term


def _square_loop(loop: Node) -> tuple[str, Node, str] | None:
    """``(q, E, m)`` of a loop (the innermost of a perfect nest) whose body is ``T d = E - m; q += d * d;`` or ``q +=
    (E - m) * (E - m);``, else None."""
    found = _innermost_accumulation(loop)
    if found is None:
        return None
    q, term, local = found
    if term.type != "binary_expression" or sx.operator(term) != "*":
        return None
    left, right = sx.unparen(term.child_by_field_name("left")), sx.unparen(term.child_by_field_name("right"))
    if _norm(sx.text(left)) != _norm(sx.text(right)):
        return None
    diff = local[1] if local is not None and sx.is_ident(left, local[0]) else left if local is None else None
    diff = sx.unparen(diff)
    if diff is None or diff.type != "binary_expression" or sx.operator(diff) != "-":
        return None
    m = sx.unparen(diff.child_by_field_name("right"))
    if not sx.is_ident(m):
        return None
    return q, diff.child_by_field_name("left"), sx.text(m)


class FuseMomentsPass(PlannedPass):
    """A sum loop then a squared-deviation loop over the same elements -> one Welford loop. See the module docstring."""

    name = "fuse_moments"
    group = "moments"  # optional and unproven: chains with and without it, the ones without first
    exact = False
    restructures = False  # (a rewrite of the loops' arithmetic: the plan's order stays the restructuring passes')

    def apply(self, unit: Unit) -> Unit:
        return unit.with_text(sx.apply_edits(unit.data, self._plan(unit)))

    def _plan(self, unit: Unit) -> list[tuple[int, int, bytes]]:
        return first_fusion(unit, lambda st: st.type == "for_statement" and _sum_loop(st) is not None, self._fuse,
                            "no sum loop followed by a loop of squared deviations",
                            "the spec asks for exact results, and Welford's running mean rounds differently")

    def _fuse(self, unit: Unit, stmts: list[Node], i: int) -> list[tuple[int, int, bytes]]:
        loop1 = stmts[i]
        nest1 = _nest(loop1)
        heads1 = [_for_header(x) for x in nest1]
        if any(h is None for h in heads1):
            raise Refused("the sum loop's header is not for (I j = a; j < n; j++)")
        s, elem = _sum_loop(loop1)
        k_idx = next((t for t in range(i + 1, len(stmts)) if stmts[t].type in sx.LOOPS), None)
        if k_idx is None or stmts[k_idx].type != "for_statement" or _square_loop(stmts[k_idx]) is None:
            raise Refused(f"no loop of squared deviations after the sum of {s} (the next loop is another)")
        loop2 = stmts[k_idx]
        between = stmts[i + 1:k_idx]
        if any(sx.contains_type(b, sx.LOOPS) for b in between):
            raise Refused("a loop between the sum and the squared deviations")
        nest2 = _nest(loop2)
        heads2 = [_for_header(x) for x in nest2]
        if any(h is None for h in heads2):
            raise Refused("the squared deviations' loop header is not for (I k = a; k < n; k++)")
        if len(heads1) != len(heads2):
            raise Refused("the sum and the squared deviations are nests of different depths")
        # the second nest's variables read as the first's, level by level (outer variables may bound inner loops)
        names1 = [h[0] for h in heads1]

        def same(t2: Node | str, t1: str, level: int) -> bool:
            text = t2 if isinstance(t2, str) else sx.text(t2)
            for v1, h2 in zip(names1[:level + 1], heads2[:level + 1]):
                text = re.sub(rf"\b{re.escape(h2[0])}\b", f"@{v1}@", text)
            base = t1
            for v1 in names1[:level + 1]:
                base = re.sub(rf"\b{re.escape(v1)}\b", f"@{v1}@", base)
            return _norm(text) == _norm(base)

        for level, (h1, h2) in enumerate(zip(heads1, heads2)):
            if not same(h2[2], h1[2], level - 1 if level else -1) or not same(h2[1], h1[1], level - 1 if level else -1):
                raise Refused("the sum loop and the squared deviations' loop have different bounds")
        q, elem2, m = _square_loop(loop2)
        if not same(elem2, sx.text(elem), len(heads1) - 1):
            raise Refused("the two loops read different elements")
        loop_vars = set(names1) | {h[0] for h in heads2}
        if q in (s, m) or loop_vars & {s, q, m}:
            raise Refused("the squares' accumulator is the sum or the centre")  # (s may be the centre: mean /= N)
        # the accumulators: locals of a float type declared in this block before their loops
        types = {}
        for st in stmts[:k_idx]:
            if st.type == "declaration":
                for d in (c for c in st.children if c.type == "init_declarator" or c.type == "identifier"):
                    name = sx.text(d.child_by_field_name("declarator") if d.type == "init_declarator" else d)
                    types[name] = (sx.type_text(st.child_by_field_name("type")), st)
        for name, loop in ((s, loop1), (q, loop2)):
            if name not in types or types[name][1].start_byte > loop.start_byte:
                raise Refused(f"{name} is not declared in the loops' block before its loop")
        ctype = types[s][0]
        if ctype not in FLOATS or types[q][0] != ctype:
            raise Refused(f"{s} and {q} are not both float or both double")
        # nothing else touches the accumulators in the loops; the element reads nothing the loops or the kernel write
        _pure(elem, {s, q, m}, _written_buffers(unit))
        if {s, q, m} & (sx.written_names(loop1) - {s}) or {s, q, m} & (sx.written_names(loop2) - {q}):
            raise Refused(f"the loops write {s}, {q} or {m} otherwise")
        if q in sx.identifiers(loop1) or (s != m and s in sx.identifiers(loop2)):
            raise Refused(f"the loops read {s} or {q} otherwise")
        for name in sx.identifiers(elem) - set(names1):
            if any(name in sx.written_names(b) and b.type != "declaration" for b in between):
                raise Refused(f"{name}, read by the element expression, is written between the loops")
        if any(name in sx.written_names(b) for b in between for name in (q,)) or any(
                q in sx.identifiers(b) for b in between if b is not types[q][1]):
            raise Refused(f"{q} is used between the loops")
        taken = sx.identifiers(unit.fn)
        tag = next(t for t in ("", *map(str, range(1, 100))) if not any(n.startswith(f"ptxf_w{t}") for n in taken))
        wn, wmu, wm2, wx, wd = (f"ptxf_w{tag}{x}" for x in ("n", "mu", "m2", "x", "d"))
        ind = sx.line_indent(unit.data, loop1.start_byte)[0].decode()
        inner = nest1[-1]
        ib = inner.child_by_field_name("body")
        iind = sx.line_indent(unit.data, inner.start_byte)[0].decode()
        update = (f"{{\n{iind}    {ctype} {wx} = {sx.text(elem)};\n"
                  f"{iind}    {wn} += 1;\n"
                  f"{iind}    {ctype} {wd} = {wx} - {wmu};\n"
                  f"{iind}    {wmu} += {wd} / {wn};\n"
                  f"{iind}    {wm2} += {wd} * ({wx} - {wmu});\n"
                  f"{iind}}}")
        nest = sx.apply_edits(loop1.text, [(ib.start_byte - loop1.start_byte, ib.end_byte - loop1.start_byte, update.encode())])
        fused = (f"int {wn} = 0;  // (transform fuse_moments: the sum and the squared deviations in one Welford pass)\n"
                 f"{ind}{ctype} {wmu} = 0, {wm2} = 0;\n"
                 f"{ind}{nest.decode()}\n"
                 f"{ind}{s} += {wmu} * ({ctype}){wn};")
        squares = f"{q} += {wm2} + ({ctype}){wn} * ({wmu} - {m}) * ({wmu} - {m});"
        return [(loop1.start_byte, loop1.end_byte, fused.encode()), (loop2.start_byte, loop2.end_byte, squares.encode())]
