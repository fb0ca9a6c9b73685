"""Index expressions as integer polynomials, and the dependence test a loop split needs.

An array index such as ``(size_t)row * N + j + half`` is read into a polynomial over the names it
uses (casts and parentheses dropped; ``+``, ``-``, ``*`` and integer literals; anything else, such
as a division, a call or a load, makes it unknown). For a loop over ``j``, an index is *affine* when
it is ``a * j + b`` with ``a`` and ``b`` free of ``j``.

:func:`independent` says whether two accesses to one buffer, at least one a write, can touch the same
element from two different iterations: for ``a * j + b1`` and ``a * j + b2`` with ``j`` over a range
of ``t`` values, never when ``b1 == b2`` (each iteration its own element) or when ``|b2 - b1|`` is
at least ``|a| * t`` (the two ranges do not overlap), proven symbolically (equal polynomials, or
differing by a non-negative constant).
"""
from __future__ import annotations

from . import syntax as sx
from .syntax import Node

Poly = dict[tuple[str, ...], int]  # monomial (sorted names, repeated for powers) -> coefficient


def poly(node: Node | None, offsets: dict[str, Poly] | None = None) -> Poly | None:
    """``node`` as a polynomial, or None when it is not a sum of products of names and integers.

    ``offsets``: names to substitute by a polynomial (none by default).
    """
    node = sx.uncast(node)
    if node is None:
        return None
    if node.type == "number_literal":
        v = sx.literal_value(node)
        return {(): v} if isinstance(v, int) and v != 0 else ({} if v == 0 else None)
    if node.type == "identifier":
        name = sx.text(node)
        if offsets and name in offsets:
            return dict(offsets[name])
        return {(name,): 1}
    if node.type == "field_expression":
        return {(sx.text(node),): 1}  # blockIdx.x and the like: a name
    if node.type == "unary_expression" and sx.operator(node) in ("-", "+"):
        p = poly(node.child_by_field_name("argument"), offsets)
        return None if p is None else (scale(p, -1) if sx.operator(node) == "-" else p)
    if node.type == "binary_expression" and sx.operator(node) in ("+", "-", "*"):
        a, b = poly(node.child_by_field_name("left"), offsets), poly(node.child_by_field_name("right"), offsets)
        if a is None or b is None:
            return None
        op = sx.operator(node)
        if op == "+":
            return add(a, b)
        if op == "-":
            return add(a, scale(b, -1))
        return mul(a, b)
    return None


def add(a: Poly, b: Poly) -> Poly:
    out = dict(a)
    for m, c in b.items():
        out[m] = out.get(m, 0) + c
        if out[m] == 0:
            del out[m]
    return out


def scale(a: Poly, k: int) -> Poly:
    return {m: c * k for m, c in a.items() if c * k != 0}


def mul(a: Poly, b: Poly) -> Poly:
    out: Poly = {}
    for ma, ca in a.items():
        for mb, cb in b.items():
            m = tuple(sorted(ma + mb))
            out[m] = out.get(m, 0) + ca * cb
            if out[m] == 0:
                del out[m]
    return out


def split(p: Poly, j: str) -> tuple[Poly, Poly] | None:
    """``(a, b)`` with ``p = a * j + b``, ``a`` and ``b`` free of ``j``; None when ``j`` appears squared."""
    a: Poly = {}
    b: Poly = {}
    for m, c in p.items():
        n = m.count(j)
        if n == 0:
            b[m] = c
        elif n == 1:
            rest = list(m)
            rest.remove(j)
            a[tuple(rest)] = c
        else:
            return None
    return a, b


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
