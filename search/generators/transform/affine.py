"""Index expressions as integer polynomials, and the dependence test a loop split needs.

An array index such as ``(size_t)row * N + j + half`` is read into a polynomial over the names it
uses (casts and parentheses dropped; ``+``, ``-``, ``*`` and integer literals; anything else, such
as a division, a call or a load, makes it unknown): :func:`ptxfactory.harness.cexpr.poly`, which the
scaffold reads index extents with too, re-exported here with its arithmetic. For a loop over ``j``, an
index is *affine* when it is ``a * j + b`` with ``a`` and ``b`` free of ``j``.

:func:`independent` says whether two accesses to one buffer, at least one a write, can touch the same
element from two different iterations: for ``a * j + b1`` and ``a * j + b2`` with ``j`` over a range
of ``t`` values, never when ``b1 == b2`` (each iteration its own element) or when ``|b2 - b1|`` is
at least ``|a| * t`` (the two ranges do not overlap), proven symbolically (equal polynomials, or
differing by a non-negative constant).

:func:`collapsed_nest` reads a loop that :mod:`.collapse` wrote from two nested loops (``h = j / m``, ``i = j % m``)
as a :class:`Nest`, whose ``independent`` is the same test over the two digits: within one ``h`` the test above on
``i``, and across two ``h`` values a step of ``h`` that moves past everything one ``h`` touches (``ov[i]`` and
``ov[i + half]`` of ``ov = out + h * D``: ``D >= 2 * half``, proven from ``half = D / 2`` and ``half >= 1``).
"""
from __future__ import annotations

from dataclasses import dataclass

from ptxfactory.harness.cexpr import Poly, add, mul, poly, scale, split, substitute  # noqa: F401 (re-exported)

from . import syntax as sx
from .syntax import Node

def _nonneg_constant(p: Poly) -> bool:
    return all(m == () for m in p) and p.get((), 0) >= 0


def independent(f: Poly, g: Poly, j: str, trip: Poly) -> bool:
    """Accesses at ``f`` and ``g`` (polynomials in ``j``) never touch one element from two different
    iterations of a loop whose ``j`` takes ``trip`` consecutive values (see the module docstring)."""
    sf, sg = split(f, j), split(g, j)
    if sf is None or sg is None:
        return False
    (af, bf), (ag, bg) = sf, sg
    if not af or af != ag:
        return False  # j absent (every iteration the same element) or different strides
    d = add(bg, scale(bf, -1))
    if not d:
        return True
    span = mul(af, trip)
    if not all(c > 0 for c in af.values()):
        span = scale(span, -1) if all(c < 0 for c in af.values()) else None
        if span is None:
            return False
    return _nonneg_constant(add(d, scale(span, -1))) or _nonneg_constant(add(scale(d, -1), scale(span, -1)))


# -- collapsed nests ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Nest:
    """A loop over a flat index ``j`` that :mod:`.collapse` wrote from two nested loops: ``outer`` and ``inner`` (the
    digits, ``outer = lo + j / n_inner``, ``inner = lo' + j % n_inner``) take ``n_outer`` and ``n_inner`` values.

    ``bounds``: ``(name, low)`` for names known to be at least ``low`` in the loop (a trip count that is one name plus
    a constant, proven positive by the guard in front of the loop); ``quotients``: ``(q, x, k)`` for a ``q`` at least 1
    declared as ``x / k`` (``k`` a positive literal): then ``x = k * q + r`` with ``0 <= r < k``, which is how ``D >= 2 *
    half`` is proven."""

    outer: str
    inner: str
    n_outer: Poly
    n_inner: Poly
    bounds: tuple[tuple[str, int], ...]
    quotients: tuple[tuple[str, str, int], ...]

    @property
    def digits(self) -> set[str]:
        return {self.outer, self.inner}

    def nonneg(self, p: Poly) -> bool:
        """``p >= 0`` proven: after the quotients' and the bounds' substitutions (``n = n' + low``), every term a
        positive multiple of non-negative names (the ``n'``, the remainders) and a non-negative constant."""
        for q, x, k in self.quotients:
            p = substitute(p, x, {(q,): k, (f"{x}%{k}",): 1})
        for n, low in self.bounds:
            p = substitute(p, n, {(f"{n}'",): 1, (): low})
        return all(c > 0 and all(n.endswith("'") or "%" in n for n in m) for m, c in p.items() if m != ()) and p.get((), 0) >= 0

    def _magnitude(self, p: Poly) -> Poly | None:
        """``|p|`` when ``p`` is proven at least 1 or at most -1, else None."""
        if self.nonneg(add(p, {(): -1})):
            return p
        if self.nonneg(add(scale(p, -1), {(): -1})):
            return scale(p, -1)
        return None

    def independent(self, f: Poly, g: Poly) -> bool:
        """Accesses at ``f`` and ``g`` (polynomials in the two digits) never touch one element from two different
        iterations: both ``A * outer + B * inner + b`` with the same ``A`` and ``B`` (free of the digits); within one
        ``outer`` value :func:`independent`'s test on ``inner`` (with ``|B| * n_inner``), and across two, ``|A| >= |B| *
        (n_inner - 1) + |b_g - b_f| + 1``: a step of ``outer`` moves past everything one ``outer`` value touches."""
        sf, sg = split(f, self.outer), split(g, self.outer)
        if sf is None or sg is None:
            return False
        (af, rf), (ag, rg) = sf, sg
        if not af or af != ag or any(self.inner in m for m in af):
            return False
        tf, tg = split(rf, self.inner), split(rg, self.inner)
        if tf is None or tg is None:
            return False
        (bf, cf), (bg, cg) = tf, tg
        if not bf or bf != bg:
            return False
        a, b = self._magnitude(af), self._magnitude(bf)
        if a is None or b is None:
            return False
        d = add(cg, scale(cf, -1))
        span = mul(b, self.n_inner)
        same = not d or self.nonneg(add(d, scale(span, -1))) or self.nonneg(add(scale(d, -1), scale(span, -1)))
        room = add(add(a, scale(mul(b, add(self.n_inner, {(): -1})), -1)), {(): -1})
        return same and self.nonneg(add(room, scale(d, -1))) and self.nonneg(add(room, d))


def collapsed_nest(loop: Node, j: str, scope: Node) -> Nest | None:
    """The :class:`Nest` of ``for (T j = 0; j < (T)(n) * (m); ++j)``, the whole consequence (braced or not) of ``if (lo <
    hi && lo' < hi')`` (the two trip counts ``n`` and ``m`` proven positive), whose body starts with the digits ``h = (U)(lo + j /
    (m));`` and ``i = (U)(lo' + j % (m));`` (declarations or assignments, neither written again); None for any other
    loop. ``scope``: the code holding the loop (the kernel's body), where the quotients are declared."""
    parent, body = loop.parent, loop.child_by_field_name("body")
    cond = sx.unparen(loop.child_by_field_name("condition"))
    if parent is not None and parent.type == "compound_statement" and sx.statements(parent) == [loop]:
        loop, parent = parent, parent.parent  # if (...) { for (...) {...} }
    if (parent is None or parent.type != "if_statement" or parent.child_by_field_name("consequence") != loop
            or parent.child_by_field_name("alternative") is not None or body is None or body.type != "compound_statement"
            or cond is None or cond.type != "binary_expression" or sx.operator(cond) != "<"):
        return None
    prod = sx.uncast(cond.child_by_field_name("right"))
    if prod is None or prod.type != "binary_expression" or sx.operator(prod) != "*":
        return None
    n_outer, n_inner = poly(prod.child_by_field_name("left")), poly(prod.child_by_field_name("right"))
    stmts = sx.statements(body)
    digits = [_digit(s, j, op) for s, op in zip(stmts[:2], "/%")]
    if n_outer is None or n_inner is None or len(digits) < 2 or None in digits or any(d[1] != n_inner for d in digits):
        return None
    (h, _), (i, _) = digits
    if h == i or _writes(body, {h, i}) > sum(s.type == "expression_statement" for s in stmts[:2]):
        return None  # a digit written again (or its address taken): not the loop collapse wrote
    trips = []
    for c in sx.conjuncts(sx.clause_value(parent.child_by_field_name("condition"))):
        if c.type == "binary_expression" and sx.operator(c) in ("<", "<="):
            lo, hi = poly(c.child_by_field_name("left")), poly(c.child_by_field_name("right"))
            if lo is not None and hi is not None:
                trips.append(add(add(hi, scale(lo, -1)), {(): 1} if sx.operator(c) == "<=" else {}))
    if n_outer not in trips or n_inner not in trips:
        return None
    written = sx.written_names(scope)
    bounds: dict[str, int] = {}
    for t in (n_outer, n_inner):  # t >= 1 with t = n + c: n >= 1 - c
        terms = [m for m in t if m != ()]
        if len(terms) == 1 and len(terms[0]) == 1 and t[terms[0]] == 1 and terms[0][0] not in written:
            bounds[terms[0][0]] = max(bounds.get(terms[0][0], 1 - t.get((), 0)), 1 - t.get((), 0))
    counts = sx.declaration_counts(scope)
    quotients = []
    for n in sx.walk(scope):
        if n.type != "init_declarator" or not sx.is_ident(n.child_by_field_name("declarator")):
            continue
        q, v = sx.text(n.child_by_field_name("declarator")), sx.uncast(n.child_by_field_name("value"))
        if bounds.get(q, 0) < 1 or counts.get(q) != 1 or v is None or v.type != "binary_expression" or sx.operator(v) != "/":
            continue
        x, k = sx.uncast(v.child_by_field_name("left")), sx.unparen(v.child_by_field_name("right"))
        kv = sx.literal_value(k) if sx.is_number(k) else None
        if sx.is_ident(x) and sx.text(x) not in written and counts.get(sx.text(x), 0) <= 1 and isinstance(kv, int) and kv > 0:
            quotients.append((q, sx.text(x), kv))
    return Nest(h, i, n_outer, n_inner, tuple(bounds.items()), tuple(quotients))


def _writes(node: Node, names: set[str]) -> int:
    """How many assignments, increments and address-takings under ``node`` have one of ``names`` as their target."""
    count = 0
    for n in sx.walk(node):
        field = {"assignment_expression": "left", "update_expression": "argument"}.get(n.type)
        if n.type == "pointer_expression" and sx.operator(n) == "&":
            field = "argument"
        target = sx.unparen(n.child_by_field_name(field)) if field else None
        count += sx.is_ident(target) and sx.text(target) in names
    return count


def _digit(stmt: Node, j: str, op: str) -> tuple[str, Poly] | None:
    """``(h, m)`` for ``T h = (T)(lo + j <op> (m));`` or ``h = ...;`` (``lo +`` optional), else None."""
    if stmt.type == "declaration":
        ds = stmt.children_by_field_name("declarator")
        if len(ds) != 1 or ds[0].type != "init_declarator" or not sx.is_ident(ds[0].child_by_field_name("declarator")):
            return None
        name, value = ds[0].child_by_field_name("declarator"), ds[0].child_by_field_name("value")
    elif stmt.type == "expression_statement" and stmt.named_child_count == 1 and stmt.named_children[0].type == "assignment_expression":
        a = stmt.named_children[0]
        name, value = sx.unparen(a.child_by_field_name("left")), a.child_by_field_name("right")
        if sx.operator(a) != "=" or not sx.is_ident(name):
            return None
    else:
        return None
    v = sx.uncast(value)
    if v is not None and v.type == "binary_expression" and sx.operator(v) == "+":
        v = sx.uncast(v.child_by_field_name("right"))
    if v is None or v.type != "binary_expression" or sx.operator(v) != op or not sx.is_ident(sx.uncast(v.child_by_field_name("left")), j):
        return None
    m = poly(v.child_by_field_name("right"))
    return None if m is None else (sx.text(name), m)
