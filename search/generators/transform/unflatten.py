"""``unflatten``: a one-thread-per-element kernel whose flat index is taken apart by divisions and remainders gets a
2-D or 3-D launch whose coordinates are those parts.

Pattern (:mod:`.opening`'s tolerant reading, declarations between the index and the guard allowed)::

    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * T * T) return;          // or if (idx < total) {...}; total declared from the spec's scalars
    int j = idx % T;                       // any spelling: idx % T, (idx / T) % T, idx / (T * T),
    int i = (idx / T) % T;                 //   int rem = idx % (T * T); int i = rem / T; ...
    int b = idx / (T * T);
    ...rest (reads idx, i, j, b)...

becomes (block ``[32, B / 32]`` for an original block of ``B`` threads; grid ``[cdiv(E0, 32), cdiv(E1, B / 32),
E2]``)::

    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    int b = blockIdx.z;
    if (j >= T || i >= T) return;
    int idx = j + T * (i + T * b);         // kept only where the code still reads it
    ...rest...

What it reads: every division ``v / X`` or remainder ``v % X`` of the index (or of such a part) is a *digit range*
``(idx / D) % M``. ``X`` is a product of factors, each an integer literal, a scalar parameter, or a sum or difference
of those (``W - KW + 1``, a valid convolution's width), written inline or through a declaration (``int OW = W - KW +
1;``): such a sum is one factor, matched by its value whatever its spelling; an expression of them holding a division
(``(W - K) / S + 1``, a strided pooling's width) is one factor too, matched by its text inlined to the scalars, and
written in the grid with the spec's ``//`` where its numerators are not negative at any spec size. The ranges' ends (``D``, ``D * M``), with
1 and the guard's bound ``N``, must be one chain under divisibility, ``1 | c1 | c2 | ... | N``: the extents ``E_k =
c_(k+1) / c_k`` are the index's mixed-radix digits. The digits are grouped into coordinates: ``x`` takes the innermost
digit and the next ones while their extent is an integer literal under 32 (``ow / 2`` of a 2x upsample leaves an
extent of 2: a warp along x needs the whole row), ``y`` the next one likewise, ``z`` all outer ones; when ``z`` would
exceed the hardware's 65535 at a spec size, its inner digits move to ``y``. A part reading digits of a coordinate
divides and takes remainders of that coordinate alone. Each part of the index is rebuilt from the coordinates, so every element is computed by one
thread with the same values: exact. A part that is exactly one coordinate and declared alone (``int j = idx % T;``,
never written) names that coordinate. What the rewrite buys: the integer divisions go (tens of instructions each),
and the kernel reads as a 2-D/3-D one, so the passes that need rows and columns take it (``smem_tile`` reads a
flattened batched GEMM through :func:`unflatten`).

Refused, with the reason (:meth:`UnflattenPass.why_not`): no opening; a launch policy other than ``"free"``; a
1-D block that is not a multiple of 32; the index written, or read in ``rest`` through ``threadIdx``/``blockIdx``/
``blockDim``/``gridDim``, barriers, warp collectives or ``__shared__`` data (a warp would hold other elements);
fewer than two digits; a bound or divisor that is not a product of scalars the spec gives values for; ends that are
not one divisibility chain; a grid out of the hardware's range at a spec size (``y`` and ``z`` at most 65535).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

from ptxfactory.harness.static_checks import MAX_GRID_DIMS
from ptxfactory.protocol import LaunchConfig
from ptxfactory.protocol.expr import ExprError, evaluate

from . import syntax as sx
from .affine import Poly, poly
from .base import Unit
from .opening import BUILTINS, ElementGuard, element_guard
from .syntax import COLLECTIVES, Node

WARP = 32  # threads of a block row: one warp along x
Monomial = tuple[int, tuple[str, ...]]  # coefficient, sorted factor names


class Refused(Exception):
    """The kernel is not a flattened one this pass can take apart; the message says why."""


@dataclass(frozen=True)
class _Digits:
    """``(idx / d) % m`` (``m`` None: no remainder, up to the bound)."""

    d: Monomial
    m: Monomial | None


@dataclass
class _Flat:
    guard: ElementGuard
    cuts: list[Monomial]  # 1 = cuts[0] | cuts[1] | ... | cuts[-1] = N
    groups: list[list[int]]  # each coordinate's digits (k: cuts[k] .. cuts[k + 1]), ascending
    parts: dict[int, _Digits]  # node id -> the digit range of that expression
    names: dict[str, _Digits]  # declared parts (never written)
    name_decls: set[int]  # their init_declarators
    coord_names: list[str]  # x, y (and z) coordinate names
    coord_decls: set[int]  # ids of the declarations that became coordinates
    idx_read: bool  # idx read outside the parts
    launch: LaunchConfig
    batch: bool = False  # the coordinates past x are block-uniform batch indices (blockIdx.y), the block 1-D


def _divides(a: Monomial, b: Monomial) -> bool:
    if b[0] % a[0]:
        return False
    rest = list(b[1])
    for n in a[1]:
        if n not in rest:
            return False
        rest.remove(n)
    return True


def _quotient(b: Monomial, a: Monomial) -> Monomial:
    rest = list(b[1])
    for n in a[1]:
        rest.remove(n)
    return (b[0] // a[0], tuple(rest))


def _times(a: Monomial, b: Monomial) -> Monomial:
    return (a[0] * b[0], tuple(sorted(a[1] + b[1])))


def _c(m: Monomial) -> str:
    """A monomial as C text (``T * T``, ``2 * N``, ``1``)."""
    parts = ([str(m[0])] if m[0] != 1 or not m[1] else []) + list(m[1])
    return " * ".join(parts)


NARROW = frozenset({"short", "unsigned short", "char", "signed char", "unsigned char", "int8_t", "uint8_t", "int16_t",
                    "uint16_t", "short int", "unsigned short int"})


def _strip(node: Node | None) -> Node | None:
    """``node`` without parentheses and casts to integer types of 32 bits or more (a cast to float changes what ``/``
    means; one to a narrower integer truncates)."""
    node = sx.unparen(node)
    while node is not None and node.type == "cast_expression":
        ctype = sx.type_text(node.child_by_field_name("type"))
        if ctype not in sx.INT_TYPES or ctype in NARROW:
            return node
        node = sx.unparen(node.child_by_field_name("value"))
    return node


class _Reader:
    """The digit ranges of a kernel's flat index ``idx`` (see the module docstring)."""

    def __init__(self, g: ElementGuard, inits: dict[str, Node], scalars: set[str]):
        self.g, self.inits, self.scalars = g, inits, scalars
        self.uniform: dict[str, Poly] = {}  # the same declarations as polynomials, earlier ones substituted
        for name, value in inits.items():
            if (p := poly(value, self.uniform)) is not None:
                self.uniform[name] = p
        self.atoms: dict[str, Poly | str] = {}  # a sum factor's C text (canonical) -> its polynomial; a quotient's -> its
        # spec expression with {scalar} placeholders (_quotient_text)
        self.names: dict[str, _Digits] = {}
        self.name_decls: set[int] = set()  # the init_declarators that declare the parts in ``names``
        self.seen: set[str] = set()  # every name a part or a divisor reads (scalars, uniform declarations, parts)
        self.parts: dict[int, _Digits] = {}

    def factors(self, node: Node | None, depth: int = 0) -> Monomial | None:
        """``node`` as a product of literals, scalars and sums of them (uniform declarations seen through), or None."""
        node = _strip(node)
        if node is None or depth > 16:
            return None
        if node.type == "number_literal":
            v = sx.literal_value(node)
            return (v, ()) if isinstance(v, int) and v > 0 else None
        if node.type == "identifier":
            name = sx.text(node)
            self.seen.add(name)
            if name in self.scalars:
                return (1, (name,))
            return self.factors(self.inits.get(name), depth + 1)
        if node.type == "binary_expression" and sx.operator(node) == "*":
            a = self.factors(node.child_by_field_name("left"), depth + 1)
            b = self.factors(node.child_by_field_name("right"), depth + 1)
            return _times(a, b) if a is not None and b is not None else None
        p = poly(node, self.uniform)
        self.seen |= sx.identifiers(node)
        if p is None:  # a quotient of scalars ((W - K) / S + 1): an opaque factor, its C text inlined to scalars
            texts = _quotient_text(node, self.scalars, self.inits)
            if texts is None:
                return None
            self.atoms[texts[0]] = texts[1]
            return (1, (texts[0],))
        if not p or any(f not in self.scalars for m in p for f in m):
            return None
        if len(p) == 1:
            (names, c), = p.items()
            return (c, tuple(sorted(names))) if c > 0 else None
        key = _poly_c(p)
        self.atoms[key] = p
        return (1, (key,))

    def divisor(self, node: Node) -> Monomial:
        m = self.factors(node)
        if m is None:
            raise Refused(f"line {node.start_point[0] + 1}: the divisor {sx.text(node)!r} is not a product of the kernel's "
                          "scalars, integer literals and sums or quotients of them")
        return m

    def digits(self, node: Node | None) -> _Digits | None:
        """The digit range ``node`` stands for, or None when it is not a part of the index."""
        node = _strip(node)
        if node is None:
            return None
        if node.type == "identifier":
            name = sx.text(node)
            self.seen.add(name)
            return _Digits((1, ()), None) if name == self.g.name else self.names.get(name)
        if node.type != "binary_expression" or sx.operator(node) not in ("/", "%"):
            return None
        left = self.digits(node.child_by_field_name("left"))
        if left is None:
            return None
        x = self.divisor(node.child_by_field_name("right"))
        if sx.operator(node) == "/":
            if left.m is not None:
                if not _divides(x, left.m):
                    raise Refused(f"line {node.start_point[0] + 1}: {sx.text(node)!r} divides a part by what does not "
                                  "divide its extent")
                return _Digits(_times(left.d, x), _quotient(left.m, x))
            return _Digits(_times(left.d, x), None)
        if left.m is not None and not _divides(x, left.m):
            raise Refused(f"line {node.start_point[0] + 1}: {sx.text(node)!r}: a remainder by what does not divide the "
                          "part's extent")
        return _Digits(left.d, x)

    def read(self, stmts: list[Node], written: set[str]) -> None:
        """Collect the parts in ``stmts``: declared ones (by name) and every outermost division or remainder."""
        for s in stmts:
            self._walk(s, written)

    def _walk(self, node: Node, written: set[str]) -> None:
        if node.type == "init_declarator":
            target, value = node.child_by_field_name("declarator"), node.child_by_field_name("value")
            if value is not None:
                self._walk(value, written)
            if sx.is_ident(target) and sx.text(target) not in written and value is not None:
                d = self.digits(value)
                if d is not None:
                    self.names[sx.text(target)] = d
                    self.name_decls.add(node.id)
            return
        if node.type == "binary_expression" and sx.operator(node) in ("/", "%"):
            d = self.digits(node)
            if d is not None:
                self.parts[node.id] = d
                return
        for c in node.named_children:
            self._walk(c, written)


def read_flat(unit: Unit, grouping: list[list[int]] | None = None, batch: bool = False) -> _Flat:
    """The flattened index of ``unit`` taken apart (module docstring), or :class:`Refused` with the reason.

    ``grouping``: each coordinate's digits (x, y, then z; 0 the innermost), in place of the module docstring's choice:
    any partition of the digits, a coordinate's digits not necessarily adjacent (a convolution's output channel on y,
    its image, row and column on x: ``smem_tile``'s implicit GEMM); :class:`Refused` when it is not a partition.
    ``batch``: x as chosen, every outer digit on one block-uniform batch index ``T b = blockIdx.y;`` (the block stays
    1-D), the opening ``rowpar`` and ``colpar`` read with a batch (a reduction over a middle dimension)."""
    if unit.body is None:
        raise Refused("no kernel body to read")
    if unit.spec.launch.policy != "free":
        raise Refused(f'the launch policy is "{unit.spec.launch.policy}", not "free": the grid may not change')
    if len(unit.launch.grid) != 1 or not unit.block_is_1d():
        raise Refused(f"not a 1-D launch (grid {list(unit.launch.grid)}, block {list(unit.launch.block)})")
    threads = unit.block_threads()
    if threads is None or threads % WARP:
        raise Refused(f"the block {list(unit.launch.block)} is not a literal multiple of {WARP} threads")
    why: list[str] = []
    g = element_guard(unit, tolerant=True, between=True, why=why)
    if g is None:
        raise Refused("no one-thread-per-element opening (T idx = blockIdx.x * blockDim.x + threadIdx.x; if (idx >= n) "
                      f"return; ...){' (' + why[0] + ')' if why else ''}")
    rest = g.rest
    written = sx.written_names(unit.body)
    for s in rest:
        if sx.identifiers(s) & BUILTINS:
            raise Refused(f"line {s.start_point[0] + 1}: the code after the index reads threadIdx/blockIdx/blockDim/gridDim")
        if sx.contains_call(s, COLLECTIVES):
            raise Refused(f"line {s.start_point[0] + 1}: a barrier or warp collective (a warp would hold other elements)")
        if any(n.type == "type_qualifier" and sx.text(n) == "__shared__" for n in sx.walk(s)):
            raise Refused(f"line {s.start_point[0] + 1}: shared data")
    if g.name in written:
        raise Refused(f"the index {g.name!r} is written")
    scalars = {a.name for a in unit.spec.args if a.role == "scalar"} - written
    reader = _Reader(g, _uniform_declarations(unit, g, scalars, written), scalars)
    reader.read(rest, written)
    bound = reader.factors(g.bound)
    counts = sx.declaration_counts(unit.fn)
    twice = sorted(n for n in reader.seen | set(reader.names) if counts.get(n, 0) > 1)
    if twice:
        raise Refused(f"{twice[0]!r} is declared more than once (a nested block's own {twice[0]}?): which one the index's "
                      "parts read is not followed")
    if bound is None:
        raise Refused(f"the guard's bound {sx.text(g.bound)!r} is not a product of the kernel's scalars, integer literals "
                      "and sums or quotients of them")
    ranges = list(reader.parts.values()) + list(reader.names.values())
    if not ranges:
        raise Refused(f"the index {g.name!r} is not taken apart (no {g.name} / X or {g.name} % X)")
    cuts = {(1, ()), bound}
    for r in ranges:
        top = _times(r.d, r.m) if r.m is not None else bound
        for c in (r.d, top):
            if not _divides(c, bound):
                raise Refused(f"{_c(c)} does not divide the guard's bound {_c(bound)}")
            cuts.add(c)
    chain = sorted(cuts, key=lambda m: (len(m[1]), m[0], m[1]))
    for a, b in zip(chain, chain[1:]):
        if not _divides(a, b) or a == b:
            raise Refused(f"the parts' extents {_c(a)} and {_c(b)} are not nested (one must divide the other)")
    values = _spec_values(unit, reader.atoms)
    groups = _groups(unit, chain, threads // WARP, values) if grouping is None else _check_grouping(grouping, len(chain) - 1)
    if batch:
        groups = [groups[0], [k for g in groups[1:] for k in g]]
    coord_names, coord_decls = _coordinates(rest, reader, chain, groups, _coordinate_type(sx.type_text(g.type_node)))
    idx_read = any(sx.is_ident(n, g.name) and not _inside(n, reader.parts)
                   for s in rest for n in sx.walk(s) if n.type == "identifier" and not _declares(n))
    return _Flat(g, chain, groups, reader.parts, reader.names, reader.name_decls, coord_names, coord_decls, idx_read,
                 _launch(unit, chain, groups, threads, values, batch), batch)


def _declares(ident: Node) -> bool:
    """Whether ``ident`` is the name a declarator declares (not a read)."""
    p = ident.parent
    return p is not None and p.type == "init_declarator" and p.child_by_field_name("declarator") == ident


def _inside(node: Node, parts: dict[int, _Digits]) -> bool:
    """Whether ``node`` lies inside one of the ``parts`` (by node id)."""
    p = node.parent
    while p is not None:
        if p.id in parts:
            return True
        p = p.parent
    return False


def _uniform_declarations(unit: Unit, g: ElementGuard, scalars: set[str], written: set[str]) -> dict[str, Node]:
    """Names declared once, never written, from the kernel's scalars, literals and earlier such names (``int total = B
    * T * T;``, ``int OW = W - KW + 1;``): their initialisers."""
    out: dict[str, Node] = {}
    for n in sx.walk(unit.body):
        if n.type != "init_declarator" or not sx.is_ident(n.child_by_field_name("declarator")):
            continue
        name = sx.text(n.child_by_field_name("declarator"))
        value = n.child_by_field_name("value")
        if name in written or name in out or name == g.name or value is None:
            continue
        if sx.identifiers(value) <= scalars | set(out) and (poly(value) is not None or _quotient_text(value, scalars, out)):
            out[name] = value
    return out


def _quotient_text(node: Node | None, scalars: set[str], inits: dict[str, Node]) -> tuple[str, str] | None:
    """An integer expression of the kernel's scalars and literals holding a division (``(W - K) / S + 1``, or a
    uniform declaration's name for one), as ``(C text, spec expression)``: the C text inlined down to scalars (valid
    anywhere in the kernel), the spec's ``//`` for C's ``/`` (the same where the operands are not negative: the
    extents' evaluation at every spec size checks the result, :func:`_quotient_sizes` the numerators). None when it
    reads anything else or holds no division."""
    def walk(n: Node | None, d: int) -> tuple[str, str, bool] | None:
        n = _strip(n)
        if n is None or d > 16:
            return None
        if n.type == "number_literal":
            v = sx.literal_value(n)
            return (str(v), str(v), False) if isinstance(v, int) and v >= 0 else None
        if n.type == "identifier":
            name = sx.text(n)
            if name in scalars:
                return name, f"{{{name}}}", False
            return walk(inits.get(name), d + 1)
        if n.type == "binary_expression" and sx.operator(n) in ("+", "-", "*", "/"):
            a, b = walk(n.child_by_field_name("left"), d + 1), walk(n.child_by_field_name("right"), d + 1)
            if a is None or b is None:
                return None
            op = sx.operator(n)
            return f"({a[0]} {op} {b[0]})", f"({a[1]} {'//' if op == '/' else op} {b[1]})", a[2] or b[2] or op == "/"
        return None

    got = walk(node, 0)
    return (got[0], got[1]) if got is not None and got[2] else None


def _poly_c(p: Poly, name=lambda f: f) -> str:
    """A polynomial as C text, its terms in a canonical order (``(W + 1 - KW)``: the key of a sum factor), each
    name written as ``name(f)``."""
    terms = []
    for mono, c in sorted(p.items(), key=lambda t: (t[1] < 0, not t[0], t[0])):  # a positive term first: no unary minus
        body = " * ".join(name(f) for f in mono)
        mag = abs(c)
        text = str(mag) if not mono else (body if mag == 1 else f"{mag} * {body}")
        terms.append(("- " if c < 0 else "+ ") + text)
    out = " ".join(terms)
    return "(" + (out[2:] if out.startswith("+ ") else "-" + out[2:]) + ")"


def _spec_values(unit: Unit, atoms: dict[str, Poly | str]) -> dict[str, str]:
    """Each factor name (a scalar, or a sum's or a quotient's key) -> its value as a spec expression (parenthesised).
    A quotient whose numerator is negative at a spec size (C's ``/`` and the spec's ``//`` differ there) is left out."""
    values = {a.name: f"({a.value})" for a in unit.spec.args if a.role == "scalar" and a.value is not None}
    for key, p in atoms.items():
        if isinstance(p, str):
            try:
                text = p.format(**values)
            except KeyError:
                continue
            if _quotient_sizes(text, unit):
                values[key] = f"({text})"
        elif all(f in values for m in p for f in m):
            values[key] = _poly_c(p, values.get)
    return values


def _quotient_sizes(text: str, unit: Unit) -> bool:
    """Whether every ``a // b`` in the spec expression ``text`` has ``a >= 0`` and ``b > 0`` at every spec size (where
    C's truncating ``/`` and the spec's flooring ``//`` agree)."""
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        return False
    divs = [n for n in ast.walk(tree) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.FloorDiv)]
    for size in unit.spec.check.sizes + unit.spec.bench.sizes:
        for d in divs:
            try:
                if int(evaluate(ast.unparse(d.left), size)) < 0 or int(evaluate(ast.unparse(d.right), size)) <= 0:
                    return False
            except ExprError:
                return False
    return True


def _extent(chain: list[Monomial], lo: int, hi: int) -> Monomial:
    return _quotient(chain[hi], chain[lo])


def _digits_extent(chain: list[Monomial], digits: list[int]) -> Monomial:
    """The product of the extents of ``digits``."""
    out: Monomial = (1, ())
    for k in digits:
        out = _times(out, _extent(chain, k, k + 1))
    return out


def _check_grouping(grouping: list[list[int]], n: int) -> list[list[int]]:
    flat = sorted(k for g in grouping for k in g)
    if flat != list(range(n)) or not 2 <= len(grouping) <= 3 or any(not g for g in grouping):
        raise Refused(f"the grouping {grouping} is not a partition of the {n} digits into 2 or 3 coordinates")
    return [sorted(g) for g in grouping]


def _groups(unit: Unit, chain: list[Monomial], by: int, values: dict[str, str]) -> list[list[int]]:
    """The digits of each coordinate (x, y, then z when digits are left): x and y each take one digit and the next
    ones while their extent is an integer literal under a warp; z the rest, its inner digits moved to y while z
    exceeds the hardware's range at a spec size."""
    n = len(chain) - 1

    def take(lo: int) -> int:
        hi = lo + 1
        while hi < n and not _extent(chain, lo, hi)[1] and _extent(chain, lo, hi)[0] < WARP:
            hi += 1
        return hi

    x = take(0)
    if x >= n:
        raise Refused(f"the index has one digit only, or inner ones of literal extents under {WARP} (nothing to put on a "
                      "second grid dimension)")
    y = take(x)
    sizes = unit.spec.check.sizes + unit.spec.bench.sizes
    while y < n and any(_evaluate(_extent(chain, y, n), values, size) > MAX_GRID_DIMS[2] for size in sizes):
        y += 1
    return [list(range(0, x)), list(range(x, y))] + ([list(range(y, n))] if y < n else [])


def _evaluate(m: Monomial, values: dict[str, str], size: dict) -> int:
    try:
        return int(evaluate(_spec_expr(m, values), size))
    except ExprError as e:
        raise Refused(f"the extent {_c(m)} cannot be evaluated at {size}: {e}") from None


def _spec_expr(m: Monomial, values: dict[str, str]) -> str:
    missing = [f for f in m[1] if f not in values]
    if missing:
        raise Refused(f"the extent {_c(m)} reads {missing[0]!r}, which the spec gives no value")
    return " * ".join(([str(m[0])] if m[0] != 1 or not m[1] else []) + [values[f] for f in m[1]])


def _coordinate_type(itype: str) -> str:
    """The type the coordinates are declared in: ``int`` for a 32-bit index, else the index's own type."""
    return "int" if itype in ("int", "unsigned", "unsigned int") else itype


def _coordinates(rest: list[Node], reader: _Reader, chain: list[Monomial], groups: list[list[int]], ctype: str
                 ) -> tuple[list[str], set[int]]:
    """The coordinates' names: a part declared alone, in the coordinates' own type, as exactly one coordinate (adjacent
    digits) names it (its declaration then goes), else ``ptxf_x``/``ptxf_y``/``ptxf_z``."""
    names, decls = [], set()
    for k, digits in enumerate(groups):
        found = None
        adjacent = digits == list(range(digits[0], digits[-1] + 1))
        for s in rest if adjacent else []:
            ds = s.children_by_field_name("declarator") if s.type == "declaration" else []
            if len(ds) != 1 or ds[0].type != "init_declarator":
                continue
            name = sx.text(ds[0].child_by_field_name("declarator"))
            d = reader.names.get(name)
            if sx.type_text(s.child_by_field_name("type")) != ctype or any(c.type == "type_qualifier" for c in s.children):
                continue
            if d is not None and d.d == chain[digits[0]] and _top(d, chain[-1]) == chain[digits[-1] + 1] and name not in names:
                found = (name, s)
                break
        if found is None:
            names.append("ptxf_" + "xyz"[k])
        else:
            names.append(found[0])
            decls.add(found[1].id)
    return names, decls


def _top(d: _Digits, bound: Monomial) -> Monomial:
    return _times(d.d, d.m) if d.m is not None else bound


def _launch(unit: Unit, chain: list[Monomial], groups: list[list[int]], threads: int, values: dict[str, str],
            batch: bool = False) -> LaunchConfig:
    """Block ``[32, threads / 32]`` (``batch``: the original ``[threads]``), grid over the coordinates' extents
    (``batch``: one block row per batch index), checked at every spec size."""
    by = threads // WARP
    ext = [_spec_expr(_digits_extent(chain, g), values) for g in groups]
    grid = [f"cdiv({ext[0]}, {threads})", ext[1]] if batch else [f"cdiv({ext[0]}, {WARP})", f"cdiv({ext[1]}, {by})"] + ext[2:]
    for size in unit.spec.check.sizes + unit.spec.bench.sizes:
        try:
            dims = [int(evaluate(e, size)) for e in grid]
        except ExprError as e:
            raise Refused(f"the grid cannot be evaluated at {size}: {e}") from None
        if any(d > lim for d, lim in zip(dims, MAX_GRID_DIMS)):
            raise Refused(f"grid {grid} out of range at {size} ({dims})")
    return LaunchConfig(grid=grid, block=[threads] if batch else [WARP, by], shared_mem=unit.launch.shared_mem)


def _rebuild(f: _Flat, d: _Digits, itype: str) -> str:
    """The part ``(idx / d.d) % d.m`` as C text from the coordinates (integer arithmetic in ``itype``): each run of its
    digits that one coordinate holds side by side, that coordinate divided by its digits below the run and reduced
    modulo the run's extent (each only where needed), scaled to the run's place in the part."""
    chain = f.cuts
    lo, hi = chain.index(d.d), chain.index(_top(d, chain[-1]))
    cast = "" if itype in ("int", "") else f"({itype})"
    owner = {k: (g, i) for g, digits in enumerate(f.groups) for i, k in enumerate(digits)}
    terms = []
    k = lo
    while k < hi:
        g, i = owner[k]
        digits = f.groups[g]
        j = k
        while j + 1 < hi and owner[j + 1] == (g, owner[j][1] + 1):
            j += 1
        term = f"{cast}{f.coord_names[g]}"
        if i > 0:
            term = f"({term} / {cast}({_c(_digits_extent(chain, digits[:i]))}))"
        if owner[j][1] < len(digits) - 1:
            term = f"({term} % {cast}({_c(_extent(chain, k, j + 1))}))"
        scale = _extent(chain, lo, k)
        terms.append(term + ("" if scale == (1, ()) else f" * {cast}({_c(scale)})"))
        k = j + 1
    return " + ".join(terms)


def digit_count(unit: Unit) -> int:
    """How many digits the flat index of ``unit`` has (:class:`Refused` when it is not taken apart)."""
    return len(read_flat(unit).cuts) - 1


def unflatten(unit: Unit, grouping: list[list[int]] | None = None, batch: bool = False) -> Unit:
    """``unit`` with its flat index taken apart into a 2-D/3-D launch (module docstring; ``grouping`` and ``batch``: as
    for :func:`read_flat`); :class:`Refused` otherwise."""
    f = read_flat(unit, grouping, batch)
    g, data = f.guard, unit.data
    itype = sx.type_text(g.type_node)
    ctype = _coordinate_type(itype)
    opening = [f"{ctype} {f.coord_names[0]} = blockIdx.x * blockDim.x + threadIdx.x;",
               f"{ctype} {f.coord_names[1]} = " + ("blockIdx.y;" if f.batch else "blockIdx.y * blockDim.y + threadIdx.y;")]
    if len(f.groups) > 2:
        opening.append(f"{ctype} {f.coord_names[2]} = blockIdx.z;")
    guarded = f.groups[:1] if f.batch else f.groups[:2]  # a batch index's grid is its extent: no guard
    leave = [f"{name} >= {_c(_digits_extent(f.cuts, digits))}" for digits, name in zip(guarded, f.coord_names)]
    if g.extra:
        leave += [f"({sx.text(x)})" if g.early else f"!({sx.text(x)})" for x in g.extra]
    opening.append(f"if ({' || '.join(leave)}) return;")
    if f.idx_read:
        opening.append(f"{itype} {g.name} = {_rebuild(f, _Digits((1, ()), None), itype)};")

    def replace(node: Node) -> bytes | None:
        if node.id in f.parts:
            return f"({_rebuild(f, f.parts[node.id], itype)})".encode()
        if node.id in f.name_decls:
            d = f.names[sx.text(node.child_by_field_name("declarator"))]
            return f"{sx.text(node.child_by_field_name('declarator'))} = {_rebuild(f, d, itype)}".encode()
        return None

    body = [sx.render(s, data, replace).decode() for s in g.rest if s.id not in f.coord_decls]
    head = data[unit.body.start_byte + 1: g.start].decode().rstrip()
    lines = ["{" + head] + ["    " + s for s in opening + body] + ["}"]
    text = sx.apply_edits(data, [(unit.body.start_byte, unit.body.end_byte, "\n".join(lines).encode())])
    return unit.with_text(text, launch=f.launch)


class UnflattenPass:
    """A flat index taken apart by ``/`` and ``%`` -> a 2-D/3-D launch over its digits (module docstring)."""

    name = "unflatten"
    unique_names = True  # reads locals by name: given the unit with each local declared once (unique_names.py)
    group = "grid"  # redefines what a thread of the grid does
    exact = True

    def why_not(self, unit: Unit) -> str | None:
        """Why the pass refuses ``unit`` (None when it applies)."""
        try:
            read_flat(unit)
        except Refused as e:
            return str(e)
        return None

    def applies(self, unit: Unit) -> bool:
        return self.why_not(unit) is None

    def apply(self, unit: Unit) -> Unit:
        return unflatten(unit)
