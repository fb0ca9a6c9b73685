"""C expressions read from tree-sitter-cuda nodes: what the scaffold (:mod:`.extents`) and the transform passes
(``search/generators/transform``: :mod:`~ptxfactory.search.generators.transform.syntax` re-exports the node helpers,
:mod:`~ptxfactory.search.generators.transform.affine` the polynomials) both read.

- node helpers: a node's descendants, its text and operator, parentheses and casts seen through, an ``if``'s
  condition, the operands of a ``&&`` chain, a number literal's value;
- index expressions as integer polynomials: ``(size_t)row * N + j + half`` read into a polynomial over the names it
  uses (casts and parentheses dropped; ``+``, ``-``, ``*`` and integer literals; anything else, such as a division,
  a call or a load, makes it unknown, or, with ``atom``, a name of its own), their arithmetic, and what the scaffold
  asks of them over sizes (names at least 1): a proof of ``p >= 0``, an exact division, the text of a spec expression.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import tree_sitter as ts

Node = ts.Node
Poly = dict[tuple[str, ...], int]  # monomial (sorted names, repeated for powers) -> coefficient


# --- node helpers ----------------------------------------------------------------------------------------------


def walk(node: Node) -> Iterator[Node]:
    """``node`` and all its descendants, pre-order (document order). A tree cursor rooted at ``node`` (it never leaves
    it): ~3x faster than a stack of each node's children list, and every pass's precondition walks its unit's tree."""
    cursor = node.walk()
    while True:
        yield cursor.node
        if cursor.goto_first_child():
            continue
        while not cursor.goto_next_sibling():
            if not cursor.goto_parent():
                return


def text(node: Node | None) -> str:
    return node.text.decode() if node is not None else ""


def operator(node: Node) -> str:
    op = node.child_by_field_name("operator")
    return text(op)


def unparen(node: Node | None) -> Node | None:
    """``node`` without enclosing parentheses."""
    while node is not None and node.type == "parenthesized_expression" and node.named_child_count == 1:
        node = node.named_children[0]
    return node


def uncast(node: Node | None) -> Node | None:
    """``node`` without enclosing parentheses and casts (``(size_t)blockIdx.x`` -> ``blockIdx.x``)."""
    node = unparen(node)
    while node is not None and node.type == "cast_expression":
        node = unparen(node.child_by_field_name("value"))
    return node


_WRITTEN_CACHE: dict[tuple[str, bytes], frozenset[str]] = {}
_WRITTEN_CACHE_MAX = 4096  # entries; cleared when full (the passes of one kernel ask of the same few loops)


def written_names(node: Node) -> set[str]:
    """Identifiers assigned (``=``, ``op=``), incremented or decremented, or whose address is taken, under ``node``.

    Syntactic, so remembered by the node's type and text (the transform passes ask it of the same loop bodies in
    every unit a kernel's chains reach); a fresh set each call (callers add to it)."""
    key = (node.type, node.text)
    found = _WRITTEN_CACHE.get(key)
    if found is None:
        if len(_WRITTEN_CACHE) >= _WRITTEN_CACHE_MAX:
            _WRITTEN_CACHE.clear()
        found = _WRITTEN_CACHE[key] = frozenset(_written_names(node))
    return set(found)


def _written_names(node: Node) -> set[str]:
    out = set()
    for n in walk(node):
        target = None
        if n.type == "assignment_expression":
            target = n.child_by_field_name("left")
        elif n.type == "update_expression":
            target = n.child_by_field_name("argument")
        elif n.type == "pointer_expression" and operator(n) == "&":
            target = n.child_by_field_name("argument")
        out |= _targets(target)
    return out


def _targets(target: Node | None) -> set[str]:
    """The names an lvalue expression may be: ``x``; either branch of ``(c ? z : e)``; the last of ``(z, e)``."""
    target = unparen(target)
    if target is None:
        return set()
    if target.type == "identifier":
        return {text(target)}
    if target.type == "conditional_expression":
        return _targets(target.child_by_field_name("consequence")) | _targets(target.child_by_field_name("alternative"))
    if target.type == "comma_expression":
        return _targets(target.child_by_field_name("right"))
    return set()


def maybe_written_names(node: Node, by_value: Callable[[Node], bool]) -> set[str]:
    """:func:`written_names` and the names something else may write: bound to a reference (``int& r = s;``), passed
    bare to a call that ``by_value`` (given the call) does not say takes its arguments by value (``grow(s, W)``: an
    ``int&`` parameter), shifted into by a stream (``std::cin >> s``)."""
    def ident(n: Node | None) -> bool:
        return n is not None and n.type == "identifier"

    out = written_names(node)
    for n in walk(node):
        if n.type == "init_declarator" and n.child_by_field_name("declarator") is not None \
                and n.child_by_field_name("declarator").type == "reference_declarator":
            v = unparen(n.child_by_field_name("value"))
            if ident(v):
                out.add(text(v))
        elif n.type == "argument_list" and n.parent is not None and n.parent.type == "call_expression" \
                and not by_value(n.parent):
            out |= {text(a) for a in (unparen(c) for c in n.named_children) if ident(a)}
        elif n.type == "binary_expression" and operator(n) == ">>" and ident(unparen(n.child_by_field_name("right"))):
            left = unparen(n.child_by_field_name("left"))
            if left is not None and left.type in ("qualified_identifier", "binary_expression") or (
                    ident(left) and text(left) in ("cin", "std")):
                out.add(text(unparen(n.child_by_field_name("right"))))
    return out


def as_condition(node: Node | None) -> Node | None:
    """``node`` (parentheses dropped) as an ``if`` would read it. In an expression the grammar takes ``(ih < 0 || ih
    >= H)`` or ``(yy >= 0 && yy < H && xx < W)`` for a template ``ih<...>`` (an assignment, a template argument
    list); an ``if`` condition of the same text parses as the comparisons it is. A node holding such a template or a
    parse error is read again from its text that way (a node of another tree: read its text and names, not its
    position); None when that reading fails too."""
    node = unparen(node)
    if node is None or not any(n.type in _MISPARSE for n in walk(node)):
        return node
    from .source import _parser  # (the harness's one parser)

    tree = _parser().parse(f"void f() {{ if ({text(node)}) ; }}".encode())
    test = next((n for n in walk(tree.root_node) if n.type == "if_statement"), None)
    cond = clause_value(test.child_by_field_name("condition")) if test is not None else None
    return None if cond is None or any(n.type in _MISPARSE for n in walk(cond)) else unparen(cond)


_MISPARSE = frozenset({"template_function", "template_argument_list", "ERROR"})


def clause_value(cond: Node | None) -> Node | None:
    """The expression inside an ``if``/``while`` ``condition_clause`` (``cond`` itself for any other node)."""
    if cond is not None and cond.type == "condition_clause":
        return cond.named_children[0] if cond.named_child_count == 1 else None
    return cond


def conjuncts(cond: Node | None, op: str = "&&") -> list[Node]:
    """The operands of a chain of ``&&`` (``op = "||"``: of ``||``; parentheses seen through), or ``[cond]`` (``[]``
    for None)."""
    cond = unparen(cond)
    if cond is None:
        return []
    if cond.type == "binary_expression" and operator(cond) == op:
        return conjuncts(cond.child_by_field_name("left"), op) + conjuncts(cond.child_by_field_name("right"), op)
    return [cond]


def literal_value(node: Node) -> float | int | None:
    """The value of a decimal number literal (suffixes ``u l f`` dropped; a leading minus kept: an int for ``-1``), or
    None."""
    t = text(node).lower()
    if t.startswith("0x"):
        try:
            return int(t.rstrip("ul"), 16)
        except ValueError:
            return None
    t = t.rstrip("ul")
    if "." in t or "e" in t:
        t = t.rstrip("f")
    elif len(t.lstrip("-")) > 1 and t.lstrip("-").startswith("0"):
        try:
            return int(t, 8)  # (010 is eight; 0b1 and 09 are no octal: None)
        except ValueError:
            return None
    try:
        return int(t) if t.lstrip("-").isdigit() else float(t)  # (tree-sitter reads -1 as one literal)
    except ValueError:
        return None


# --- polynomials -----------------------------------------------------------------------------------------------


def int_constant(node: Node | None) -> int | None:
    """The value of an integer constant expression: decimal, hex or octal literals under ``+ - * / % << >>``, unary
    minus, parentheses and casts (``512 / 2`` where a ``#define`` was expanded, ``(1 << 8)``); C's truncating division.
    None for anything else (a name, a float, a division by zero)."""
    node = uncast(node)
    if node is None:
        return None
    if node.type == "number_literal":
        v = literal_value(node)
        return v if isinstance(v, int) else None
    if node.type == "unary_expression" and operator(node) in ("-", "+"):
        v = int_constant(node.child_by_field_name("argument"))
        return None if v is None else (-v if operator(node) == "-" else v)
    if node.type != "binary_expression":
        return None
    a, b = int_constant(node.child_by_field_name("left")), int_constant(node.child_by_field_name("right"))
    op = operator(node)
    if a is None or b is None:
        return None
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op in ("/", "%"):
        if b == 0:
            return None
        q = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)
        return q if op == "/" else a - q * b
    if op in ("<<", ">>") and 0 <= b < 64:
        return a << b if op == "<<" else a >> b
    return None


def poly(node: Node | None, offsets: dict[str, Poly] | None = None,
         atom: Callable[[Node], Poly | None] | None = None) -> Poly | None:
    """``node`` as a polynomial, or None when it is not a sum of products of names and integers.

    ``offsets``: names to substitute by a polynomial (none by default). ``atom``: what any other subexpression
    (``i / C``, ``min(a, b)``, ``q[r]``) reads as (None: the whole is unknown).
    """
    node = uncast(node)
    if node is None:
        return None
    if node.type == "number_literal":
        v = literal_value(node)
        if isinstance(v, float) and v.is_integer() and text(node).startswith("-") and text(node)[1:].isdigit():
            v = int(v)  # -1: one literal
        return {(): v} if isinstance(v, int) and v != 0 else ({} if v == 0 else None)
    if node.type == "identifier":
        name = text(node)
        if offsets and name in offsets:
            return dict(offsets[name])
        return {(name,): 1}
    if node.type == "field_expression":
        return {(text(node),): 1}  # blockIdx.x and the like: a name
    if node.type == "unary_expression" and operator(node) in ("-", "+"):
        p = poly(node.child_by_field_name("argument"), offsets, atom)
        return None if p is None else (scale(p, -1) if operator(node) == "-" else p)
    if node.type == "binary_expression" and operator(node) in ("+", "-", "*"):
        a, b = poly(node.child_by_field_name("left"), offsets, atom), poly(node.child_by_field_name("right"), offsets, atom)
        if a is None or b is None:
            return None
        op = operator(node)
        if op == "+":
            return add(a, b)
        if op == "-":
            return add(a, scale(b, -1))
        return mul(a, b)
    return atom(node) if atom is not None else None


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


def substitute(p: Poly, name: str, by: Poly) -> Poly:
    """``p`` with every occurrence of ``name`` replaced by the polynomial ``by``."""
    out: Poly = {}
    for m, c in p.items():
        term: Poly = {(): c}
        for n in m:
            term = mul(term, by if n == name else {(n,): 1})
        out = add(out, term)
    return out


def names(p: Poly) -> set[str]:
    """The names ``p`` uses."""
    return {n for m in p for n in m}


def constant(k: int) -> Poly:
    return {(): k} if k else {}


def nonneg(p: Poly) -> bool:
    """``p >= 0`` proven for every value at least 1 of its names (sizes): written over ``n = n' + 1``, every
    coefficient is non-negative."""
    for n in names(p):
        p = substitute(p, n, {(n,): 1, (): 1})
    return all(c >= 0 for c in p.values())


def at_most(a: Poly, b: Poly) -> bool:
    """``a <= b`` proven (:func:`nonneg` of ``b - a``)."""
    return nonneg(add(b, scale(a, -1)))


def divide(p: Poly, d: Poly) -> Poly | None:
    """``p / d`` when ``d`` divides ``p`` exactly as polynomials with integer coefficients (``2 * H`` divides
    ``2 * H * W``; ``(H - 2) * (W - 2)`` divides ``(D - 2) * (H - 2) * (W - 2)``), else None. Long division by the
    leading terms (the highest degree, then the names' order): a remainder, or a coefficient that does not divide,
    is None."""
    d = {m: c for m, c in d.items() if c}
    if not d:
        return None

    def lead(q: Poly) -> tuple[str, ...]:
        return max(q, key=lambda m: (len(m), m))

    dm = lead(d)
    dc = d[dm]
    rest = {m: c for m, c in p.items() if c}
    out: Poly = {}
    for _ in range(64 + 4 * len(rest)):  # each step removes the leading term: bounded by the terms' count and degree
        if not rest:
            return out
        m = lead(rest)
        c = rest[m]
        left = list(m)
        for n in dm:
            if n not in left:
                return None
            left.remove(n)
        if c % dc:
            return None
        t = {tuple(left): c // dc}
        out = add(out, t)
        rest = {k: v for k, v in add(rest, scale(mul(t, d), -1)).items() if v}
    return None


def show(p: Poly, order: Sequence[str] = ()) -> str:
    """``p`` as a spec expression (``2 * H``, ``M * V - 1``): higher degrees first, the names of a term in ``order``
    (then alphabetically)."""
    def rank(n: str) -> tuple[int, str]:
        return (order.index(n) if n in order else len(order), n)

    terms = sorted(p.items(), key=lambda mc: (-len(mc[0]), [rank(n) for n in mc[0]]))
    out = ""
    for m, c in terms:
        factors = ([str(abs(c))] if abs(c) != 1 or not m else []) + sorted(m, key=rank)
        term = " * ".join(factors)
        out += (f" - {term}" if c < 0 else f" + {term}") if out else (f"-{term}" if c < 0 else term)
    return out or "0"
