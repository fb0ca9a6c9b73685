"""``interior``: a loop nest's bounds checks tested once for the whole nest, and the nest run without them inside.

A convolution, a pooling or a stencil written one thread per output tests every tap against the input's edges::

    for (int kh = 0; kh < K; kh++)
        for (int kw = 0; kw < K; kw++) {
            int ih = oh * S - P + kh, iw = ow * S - P + kw;
            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;     // (or: if (ih >= 0 && ih < H && ...) {...})
            acc += x[(c * H + ih) * W + iw];  cnt++;
        }

For most outputs (those whose window lies inside the input) every test passes; still each tap pays four compares and
a branch, and the taps cannot be issued as one straight run of loads. :class:`InteriorPass` versions the nest::

    if (<the window's first and last taps are inside, by each test's extreme values>) {
        ...the nest, the bounds terms dropped: the taps' loads back to back (an average pooling's count a constant)...
    } else {
        ...the nest as written (the border outputs)...
    }

Exact: a term is dropped only where the version's condition proves it holds (or, in a ``continue`` test, fails) for
every iteration of the nest: the term is ``P op Q`` (``<``, ``<=``, ``>``, ``>=``) with ``P - Q`` affine in the
counters of the loops around it (read through the declarations of locals on the way, ``int ih = oh * S - P + kh;``),
each counter's coefficient free of the counters, each loop ``for (int v = a; v < b; v++)`` with bounds the nest never
changes; ``P - Q``'s least value over the box of counters (each counter at its first or last value, by its
coefficient's sign: ``min(c * a, c * (b - 1))``, computed in 64 bits) decides. A counter whose loop runs no iteration
leaves the test unrun. The rest of the kernel is untouched; the nest's other tests stay.

Applies to the outermost ``for`` loop whose nest holds such a term (a loop around it, a coarsening's or a grid-stride
loop, is left as it is: the version's condition is evaluated where the nest starts, each time) in an ``if`` without
``else``:
a ``continue`` test's ``||`` terms, any other test's ``&&`` terms. Every name a dropped term reads is a counter of a
loop between the nest and the test, a local declared once in the nest on the path to the test and never written
there, or a name the nest neither declares nor writes and the kernel never aliases; all of them 32-bit ``int`` (as
:mod:`.modstep` reads its tests: an unsigned or wider operand is another arithmetic). Loops in a lambda, kernels with
``goto``, labels or a lambda capturing by reference are left alone.

Clamped and padded windows test their taps in expressions; the inside version decides those too, its condition
holding their extremes as well:

- a clamp, ``min(a, b)`` / ``max(a, b)`` of 32-bit ints (nested: ``min(max(y + dy, 0), H - 1)``), one argument
  varying over the counters and the other not, is the varying one where it is always the lesser (the greater);
- a select ``c ? x : y`` whose condition is such comparisons is its inside branch, the terms decided dropped: the
  branch that is the compared value itself (``e < 0 ? 0 : e``, ``e >= W ? W - 1 : e``), or a load against a literal
  of the load's own type (``(ih < 0 || ih >= H) ? 0.0f : x[ih]``; a select of two types has a third, and is kept).

A test's term may also be a negation (``if (!(ih >= 0 && ih < H)) continue;``) or a ``bool`` local declared once on
the way and never written (``bool inside = ih >= 0 && ih < H; ... inside ? x[ih] : 0.0f``): its condition is decided
as the test's own would be. Which branch is taken inside is only a choice of the version worth having; the version's
condition proves it.
``min`` and ``max`` are read as CUDA's unless the kernel declares the name or the file defines or declares it
(``FUNCTIONS_NOTE``).
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from ptxfactory.harness import cexpr

from . import syntax as sx
from .base import FUNCTIONS_NOTE, LOAD_FUNCS, Unit
from .ldg import NA_ELEMENTS
from .modstep import (_INT32, _aliased, _base, _captures_by_reference, _header, _int_terms, _opaque, _pure, _skip_only,
                      _visible_type)
from .syntax import Node

_FLIP = {"<": ">=", "<=": ">", ">": "<=", ">=": "<"}
NO_NEST = ("no loop nest tests its counters against bounds it can decide once for the whole nest (an if's comparisons, "
           "a clamp's min/max, a select's condition, each affine in the counters of int loops with fixed bounds)")
MAX_TERMS = 16  # terms one version may test (a 3-D window's six faces, twice over)


class InteriorPass:
    """A loop nest's bounds checks tested once at its extremes; the nest without them where they hold (docstring)."""

    name = "interior"
    group = "interior"  # optional and unproven: chains with and without it (transform/__init__.py)
    exact = True
    restructures = False

    def why_not(self, unit: Unit) -> str | None:
        """Why the pass leaves ``unit`` alone (None when it applies)."""
        if unit.body is None:
            return "the kernel does not parse"
        if sx.contains_type(unit.body, ("goto_statement", "labeled_statement")):
            return "the kernel has goto or labels"
        if any(_captures_by_reference(n) for n in sx.walk(unit.body) if n.type == "lambda_expression"):
            return "a lambda captures by reference (what it writes is not read here)"
        return None if _plans(unit) else NO_NEST

    def applies(self, unit: Unit) -> bool:
        return self.why_not(unit) is None

    def maybe(self, unit: Unit) -> bool:
        """Whether a chain could bring the pass to apply (plan_chains): an ``if`` inside a ``for`` loop, or a clamp or
        select it decides already (a ``min`` in a loop is often a reduction's: no reason to double the chains)."""
        return unit.body is not None and (any(
            n.type == "if_statement" and any(p.type == "for_statement" for p in _ancestors(n, unit.body))
            for n in sx.walk(unit.body)) or self.applies(unit))

    def apply(self, unit: Unit) -> Unit:
        """``unit`` with each nest that tests its bounds versioned (module docstring). Raises ``ValueError`` when the
        pass does not apply."""
        if self.why_not(unit) is not None:
            raise ValueError(f"interior does not apply: {self.why_not(unit)}")
        edits = []
        for nest, conds, drops, swaps in _plans(unit):
            inner = _without(unit.data, nest, drops, swaps)
            ind = sx.line_indent(unit.data, nest.start_byte)[0].decode()
            text = (f"if ({' && '.join(conds)}) {{  // every tap inside: the bounds tests hold (transform interior)\n"
                    f"{ind}{inner}\n{ind}}} else {{\n{ind}{sx.text(nest)}\n{ind}}}")
            pragma = sx.pragma_before(nest)  # (#pragma unroll: each copy's, above its loop)
            if pragma is not None:
                p = sx.text(pragma).strip() + "\n" + ind
                text = text.replace(f"\n{ind}{inner}\n", f"\n{ind}{p}{inner}\n", 1).replace(
                    f"\n{ind}{sx.text(nest)}\n", f"\n{ind}{p}{sx.text(nest)}\n", 1)
            at = pragma or nest
            edits.append((at.start_byte, nest.end_byte, text.encode()))
        return unit.with_text(sx.apply_edits(unit.data, edits))


def _misread(nest: Node) -> bool:
    """Whether a declaration in ``nest`` may hide from the declaration counts: a structured binding (its names
    after the first), a parse error, or the grammar's template reading of comparisons swallowing declarators (``int
    t = kh < 2, H{kh + 1}, u = 3 > (0);``: a template argument list of several arguments in a declaration; a select's
    ``(ih < 0 || ih >= H)`` read as a template has one, and :func:`~ptxfactory.harness.cexpr.as_condition` reads it again)."""
    for n in sx.walk(nest):
        if n.type in ("structured_binding_declarator", "ERROR"):
            return True
        if n.type == "template_argument_list" and n.named_child_count > 1 and \
                any(a.type == "declaration" for a in _ancestors(n, nest.parent)):
            return True
    return False


def _ancestors(n: Node, stop: Node):
    p = n.parent
    while p is not None and p != stop:
        yield p
        p = p.parent


def _plans(unit: Unit) -> list[tuple[Node, list[str], list[tuple[Node, Node, bool]], list[tuple[Node, str]]]]:
    """``(outermost loop, the version's conditions, the terms dropped: (if statement, term, skip), the values decided:
    (node, its text))`` for each nest."""
    out = []
    aliased = _aliased(unit.body)
    for nest in sx.walk(unit.body):
        if nest.type != "for_statement" or sx.in_lambda(nest, unit.body) or any(_within(nest, n) for n, *_ in out):
            continue  # (the outermost loop that has a plan: one inside a coarsening or grid-stride loop too)
        if _opaque(nest) or sx.contains_call(nest, sx.COLLECTIVES) or "__shared__" in sx.text(nest):
            continue  # (a barrier in two copies of the nest: a block's threads split between them)
        if _misread(nest):
            continue  # (a declaration the counts may not see: int t = a < 2, H{5}; read as a template)
        conds: list[str] = []
        drops: list[tuple[Node, Node, bool]] = []
        written = sx.maybe_written_names(nest)
        counts = sx.declaration_counts(nest)
        for test in sx.walk(nest):
            if test.type != "if_statement" or test.child_by_field_name("alternative") is not None:
                continue
            skip = _skip_only(test.child_by_field_name("consequence"))
            cond = sx.clause_value(test.child_by_field_name("condition"))
            terms = sx.conjuncts(cond, "||" if skip else "&&")
            if not all(_pure(t) for t in terms):
                continue
            scope = _scope(unit, nest, test, written, counts, aliased)
            if scope is None:
                continue
            for t in terms:
                c = _always(t, not skip, scope)
                if c is not None and len(conds) < MAX_TERMS:
                    conds.append(c)
                    drops.append((test, t, skip))
        swaps = _swaps(unit, nest, conds, drops, written, counts, aliased)
        if drops or swaps:
            out.append((nest, conds, drops, swaps))
    return out


def _swaps(unit: Unit, nest: Node, conds: list[str], drops: list[tuple[Node, Node, bool]], written: set[str],
           counts: dict[str, int], aliased: set[str]) -> list[tuple[Node, str]]:
    """The clamps and selects in ``nest`` the inside version decides (``(node, its text there)``), their conditions
    added to ``conds``: ``min(max(y + dy, 0), H - 1)`` is ``y + dy`` where every tap is inside, ``ih >= 0 && ih < H ?
    x[ih] : 0.f`` is ``x[ih]`` (module docstring). A node inside a test whose terms are dropped, or inside one already
    taken, is not visited."""
    hidden = _functions(unit)
    busy = [t.child_by_field_name("condition") for t, _, _ in drops]
    swaps: list[tuple[Node, str]] = []
    for node in sx.walk(nest):
        if node.type not in ("call_expression", "conditional_expression") or \
                any(_within(node, b) or _within(b, node) for b in busy) or any(_within(node, n) for n, _ in swaps):
            continue
        if node.type == "call_expression" and (sx.call_name(node) not in ("min", "max") or sx.call_name(node) in hidden):
            continue
        scope = _scope(unit, nest, node, written, counts, aliased)
        if scope is None:
            continue
        got = _value(node, scope, hidden)
        if not got.swapped:
            continue
        new = [c for c in dict.fromkeys(got.conds) if c not in conds]
        if len(conds) + len(new) > MAX_TERMS:
            continue
        conds += new
        swaps.append((node, got.text))
    return swaps


def _within(node: Node, outer: Node | None) -> bool:
    return outer is not None and outer.start_byte <= node.start_byte and node.end_byte <= outer.end_byte


def _functions(unit: Unit) -> set[str]:
    """``min`` and ``max`` where the kernel or the file gives them another meaning (a local, a parameter, the file's
    own function or macro, a ``using`` declaration: ``FUNCTIONS_NOTE``, ``sx.file_functions``); the clamps read them
    as CUDA's integer ``min``/``max`` otherwise."""
    own = (sx.declared_names(unit.fn) | sx.file_functions(unit.fn) if unit.fn is not None else set()) | \
        set(unit.notes.get(FUNCTIONS_NOTE, ()))
    return {"min", "max"} & own


@dataclass
class _Value:
    """An expression of the nest as the inside version writes it: its value as a polynomial over the counters and
    fixed names (None when it is no int arithmetic the pass reads), its text there, the conditions under which that
    text has the original's value, and whether the text differs from the original's."""

    poly: dict | None
    text: str
    conds: list[str]
    swapped: bool = False


def _value(node: Node, scope: "_Scope", hidden: set[str]) -> _Value:
    """``node`` decided where it can be (a clamp, a select), else as written."""
    n = sx.unparen(node)
    got = None
    if n is not None and n.type == "call_expression" and sx.call_name(n) in ("min", "max") and \
            sx.call_name(n) not in hidden and len(sx.call_args(n)) == 2 and _pure_value(n, hidden):
        got = _extreme(n, scope, hidden)  # (both arguments evaluated: neither may have an effect)
    elif n is not None and n.type == "conditional_expression":
        got = _select(n, scope, hidden)
    if got is not None:
        return got
    plain = cexpr.poly(node, scope.offsets) if _int_terms(node, scope.types) else None
    return _Value(plain, sx.text(node), [])


def _pure_value(node: Node, hidden: set[str]) -> bool:
    """No assignment, increment or comma in ``node``, and no call but CUDA's value functions and loads (a clamp's
    ``min``/``max`` among them, unless the file or kernel gives the name another meaning)."""
    for n in sx.walk(node):
        if n.type in ("assignment_expression", "update_expression", "comma_expression"):
            return False
        if n.type == "call_expression" and (sx.call_name(n) not in (sx.VALUE_FUNCS | LOAD_FUNCS) or sx.call_name(n) in hidden):
            return False
    return True


def _varies(p: dict | None, scope: "_Scope") -> bool:
    return p is not None and any(n in scope.counters for n in cexpr.names(p))


def _extreme(call: Node, scope: "_Scope", hidden: set[str]) -> _Value | None:
    """``min(a, b)`` (``max``) of 32-bit ints, one of them varying over the nest and the other not: the varying one,
    where it is always the lesser (greater) one."""
    a, b = (_value(x, scope, hidden) for x in sx.call_args(call))
    if a.poly is None or b.poly is None or _varies(a.poly, scope) == _varies(b.poly, scope):
        return None
    keep, other = (a, b) if _varies(a.poly, scope) else (b, a)
    cond = _always_polys(keep.poly, "<=" if sx.call_name(call) == "min" else ">=", other.poly, scope)
    if cond is None:
        return None
    return _Value(keep.poly, _paren(keep.text), keep.conds + other.conds + [cond], True)


def _select(sel: Node, scope: "_Scope", hidden: set[str]) -> _Value | None:
    """``c ? x : y`` with ``c`` comparisons the nest decides: the branch where every tap is inside (the one that is
    the compared value itself, ``e < 0 ? 0 : e``; or a load against a literal, ``in ? x[i] : 0.f``), its terms of
    ``c`` dropped, each where it always holds (``&&``; the consequence) or always fails (``||``; the alternative)."""
    cond = cexpr.as_condition(sel.child_by_field_name("condition"))
    x, y = sel.child_by_field_name("consequence"), sel.child_by_field_name("alternative")
    if cond is None or x is None or y is None or not _pure_value(cond, hidden):
        return None  # (the branch not taken is not evaluated: its effects, if any, stay unrun)
    xv, yv = _value(x, scope, hidden), _value(y, scope, hidden)
    take = _inside_branch(cond, (x, xv), (y, yv), scope)
    if take is None:
        return None
    first = take == 0
    terms = sx.conjuncts(cond, "&&" if first else "||")
    decided, kept = [], []
    for t in terms:
        c = _always(t, first, scope)
        (decided if c is not None else kept).append(c if c is not None else t)
    if not decided:
        return None
    chosen = xv if first else yv
    if not kept:
        return _Value(chosen.poly, _paren(chosen.text), chosen.conds + decided, True)
    joined = (" && " if first else " || ").join(f"({sx.text(t)})" for t in kept)
    return _Value(None, f"(({joined}) ? {sx.text(x)} : {sx.text(y)})", decided, True)


def _inside_branch(cond: Node, x: tuple[Node, _Value], y: tuple[Node, _Value], scope: "_Scope") -> int | None:
    """0 (the consequence) or 1 (the alternative): the branch an inside tap takes, by the two idioms; None when
    neither fits. (Which branch is only a choice of the version worth having: the conditions prove it is taken.)"""
    sides = []
    for t in sx.conjuncts(cond, "&&") + sx.conjuncts(cond, "||"):
        t = sx.unparen(t)
        if t is not None and t.type == "binary_expression" and sx.operator(t) in _FLIP:
            for s in (t.child_by_field_name("left"), t.child_by_field_name("right")):
                if _int_terms(s, scope.types):
                    p = cexpr.poly(s, scope.offsets)
                    if _varies(p, scope):
                        sides.append(p)
    same = [i for i, (_, v) in enumerate((x, y)) if v.poly is not None and v.poly in sides]
    if len(same) == 1 and x[1].poly is not None and y[1].poly is not None:  # (both int: the select's type is theirs)
        return same[0]  # the clamp's idiom: e < 0 ? 0 : e, e >= H ? H - 1 : e
    loads = [i for i, (n, _) in enumerate((x, y)) if _loads(n)]
    if len(loads) == 1 and _literal((y if loads[0] == 0 else x)[0]) and _same_type(x[0], y[0], scope.types):
        return loads[0]  # the padding's idiom: in ? x[i] : 0.f
    return None


def _loads(node: Node) -> bool:
    return any(n.type == "subscript_expression" or sx.call_name(n) in LOAD_FUNCS for n in sx.walk(node))


def _literal(node: Node) -> bool:
    n = sx.unparen(node)
    if n is not None and n.type == "cast_expression":
        n = sx.unparen(n.child_by_field_name("value"))
    if n is not None and n.type == "unary_expression" and sx.operator(n) in ("-", "+"):
        n = sx.unparen(n.child_by_field_name("argument"))
    return n is not None and n.type == "number_literal"


def _same_type(x: Node, y: Node, types: sx.Types) -> bool:
    """The two branches have one type, so that the select's value is the chosen branch's own (``c ? b[i] : 0``
    with ``b`` of ``unsigned char`` is an ``int``; ``c ? x[i] : 0.0`` with ``x`` of float a double): both cast to the
    same type, or a load of ``float`` (``double``, ``int``) elements against a literal of that type."""
    x, y = sx.unparen(x), sx.unparen(y)
    if x is None or y is None:
        return False
    if x.type == "cast_expression" and y.type == "cast_expression":
        return sx.type_text(x.child_by_field_name("type")) == sx.type_text(y.child_by_field_name("type"))
    load, lit = (x, y) if y.type in ("number_literal", "unary_expression") else (y, x)
    kind, element = _literal_kind(lit), _load_type(load, types)
    return kind is not None and element is not None and (element in _INT32 if kind == "int" else element == kind)


def _load_type(load: Node, types: sx.Types) -> str | None:
    """The element type (``const``/``volatile`` dropped) a load reads: ``p[i]``, ``__ldg(p + i)``, ``__ldg(&p[i])``,
    ``ptxf_ldna_f32(...)``, ``p`` a pointer or array declared once; None for anything else."""
    name = sx.call_name(load)
    if name is not None and name.startswith("ptxf_ldna_"):
        return NA_ELEMENTS.get(name[len("ptxf_ldna_"):])  # (ldg.py's helpers, by their suffix)
    if name in LOAD_FUNCS and len(sx.call_args(load)) == 1:
        arg = sx.unparen(sx.call_args(load)[0])
        if arg is not None and arg.type == "pointer_expression" and sx.operator(arg) == "&":
            load = sx.unparen(arg.child_by_field_name("argument"))  # &p[i]
        else:
            while arg is not None and arg.type == "binary_expression" and sx.operator(arg) == "+":
                arg = sx.unparen(arg.child_by_field_name("left"))  # p + i (+ j)
            return _base(types.element.get(sx.text(arg)) or "") or None if sx.is_ident(arg) else None
    if load is not None and load.type == "subscript_expression":
        arg = load.child_by_field_name("argument")
        return _base(types.element.get(sx.text(arg)) or "") or None if sx.is_ident(arg) else None
    return None


def _literal_kind(node: Node) -> str | None:
    """``"int"`` for a decimal literal without suffix that fits an int, ``"float"`` for a decimal one with ``f``,
    ``"double"`` without; None for any other (``0u``, ``0L``, octal, hex, ``3000000000``: another type)."""
    n = sx.unparen(node)
    if n is not None and n.type == "unary_expression" and sx.operator(n) in ("-", "+"):
        n = sx.unparen(n.child_by_field_name("argument"))
    if n is None or n.type != "number_literal":
        return None
    t = sx.text(n).lstrip("-")
    if re.fullmatch(r"0|[1-9][0-9]*", t):
        return "int" if int(t) < 2 ** 31 else None
    m = re.fullmatch(r"(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+(?=[eE]))(?:[eE][-+]?[0-9]+)?([fF]?)", t)
    return None if m is None else ("float" if m.group(1) else "double")


def _paren(text: str) -> str:
    """``text`` as one operand wherever it lands (``(a) + (b)`` is no parenthesised expression: wrapped too)."""
    if re.fullmatch(r"[A-Za-z_]\w*|[0-9]+", text):
        return text
    depth = 0
    for i, ch in enumerate(text):  # one parenthesised whole: its first "(" closes at the end
        depth += (ch == "(") - (ch == ")")
        if depth == 0:
            return text if i == len(text) - 1 and text[0] == "(" else f"({text})"
    return f"({text})"


@dataclass
class _Scope:
    """What a test inside a nest may read: the counters of the loops around it (name -> (first, last) as 64-bit C), the
    locals on the way as polynomials, which other names stay fixed in the nest, the kernel's declared types, and the
    ``bool`` locals on the way with their conditions (``bool inside = ih >= 0 && ih < H;``)."""

    counters: dict[str, tuple[str, str]]
    offsets: dict[str, dict]
    fixed: Callable[[str], bool]
    types: sx.Types
    flags: dict[str, Node] = field(default_factory=dict)  # bool locals on the way: name -> the condition they hold


def _scope(unit: Unit, nest: Node, test: Node, written: set[str], counts: dict[str, int], aliased: set[str]) -> _Scope | None:
    """The counters and locals a test inside ``nest`` reads, walking from ``nest`` down to ``test``; None where a loop
    on the way is not of the counted form or its bounds change in the nest."""
    path = [test] + list(_ancestors(test, nest.parent))
    path.reverse()  # nest ... test
    counters: dict[str, tuple[str, str]] = {}
    offsets: dict[str, dict] = {}
    flags: dict[str, Node] = {}

    def fixed(name: str) -> bool:  # an int declared around the nest (in scope), never written in it nor aliased
        return name not in written and name not in aliased and counts.get(name, 0) == 0 and \
            _visible_type(name, nest, unit.fn) in _INT32

    for node, child in zip(path, path[1:]):
        if node.type == "for_statement" and child == node.child_by_field_name("body"):
            head = _header(node)
            if head is None:
                continue  # its counter is no name the terms may read (they are refused where they read it)
            v, start, bound, _ = head
            cond = sx.unparen(node.child_by_field_name("condition"))
            if v in sx.maybe_written_names(node.child_by_field_name("body")) or counts.get(v, 0) != 1:
                continue
            if not all(fixed(n) for n in sx.identifiers(start) | sx.identifiers(bound)) or not (
                    _int_terms(start, unit.types) and _int_terms(bound, unit.types)):
                continue
            last = f"(long long)({sx.text(bound)})" + (" - 1" if sx.operator(cond) == "<" else "")
            counters[v] = (f"(long long)({sx.text(start)})", last)
        elif node.type == "compound_statement":
            for s in sx.statements(node):
                if s == child:
                    break
                if s.type != "declaration" or not _pure(s):
                    continue
                for d in s.children_by_field_name("declarator"):
                    if d.type != "init_declarator" or not sx.is_ident(d.child_by_field_name("declarator")):
                        continue
                    name = sx.text(d.child_by_field_name("declarator"))
                    value = d.child_by_field_name("value")
                    if counts.get(name) != 1 or name in written or name in aliased:
                        continue
                    if _base(unit.types.scalar.get(name) or "") == "bool" and value is not None:
                        # a flag the tests read by name: its condition read where it is tested, so every name it reads
                        # must mean there what it means here (a counter, a local or a flag already on the way, or a
                        # name fixed in the nest: each declared once in the nest, or not at all); no flag reads itself
                        if all(n in counters or n in offsets or n in flags or fixed(n) for n in sx.identifiers(value)):
                            flags[name] = value
                        continue
                    if _base(unit.types.scalar.get(name) or "") not in _INT32 or not _int_terms(value, unit.types):
                        continue
                    p = cexpr.poly(value, offsets)
                    if p is not None and all(n in counters or n in offsets or fixed(n) for n in cexpr.names(p)):
                        offsets[name] = p
    return _Scope(counters, offsets, fixed, unit.types, flags)


def _always(term: Node, holds: bool, scope: _Scope) -> str | None:
    """A C condition, over names fixed in the nest, under which ``term`` is true (``holds``) or false for every
    iteration of the loops around it; None where the term is no affine comparison the pass reads. A negation, an
    ``&&`` that must hold (an ``||`` that must fail) and a ``bool`` local's condition are read through."""
    term = sx.unparen(term)
    if term is not None and term.type == "unary_expression" and sx.operator(term) == "!":
        return _always(term.child_by_field_name("argument"), not holds, scope)
    if term is not None and term.type == "binary_expression" and sx.operator(term) == ("&&" if holds else "||"):
        parts = [_always(t, holds, scope) for t in sx.conjuncts(term, sx.operator(term))]
        return None if None in parts else " && ".join(parts)
    if sx.is_ident(term) and sx.text(term) in scope.flags:
        flag = cexpr.as_condition(scope.flags[sx.text(term)])
        return _always(flag, holds, scope) if flag is not None and _pure(flag) else None
    if term is None or term.type != "binary_expression" or sx.operator(term) not in _FLIP:
        return None
    op = sx.operator(term) if holds else _FLIP[sx.operator(term)]
    left, right = term.child_by_field_name("left"), term.child_by_field_name("right")
    if not (_int_terms(left, scope.types) and _int_terms(right, scope.types)):
        return None
    p, q = cexpr.poly(left, scope.offsets), cexpr.poly(right, scope.offsets)
    if p is None or q is None:
        return None
    return _always_polys(p, op, q, scope)


def _always_polys(p: dict, op: str, q: dict, scope: _Scope) -> str | None:
    """A C condition, over names fixed in the nest, under which ``p op q`` holds for every iteration of the loops
    around it (``op``: ``<``, ``<=``, ``>``, ``>=``); None where it cannot be decided once."""
    # op: p < q, p <= q, p > q, p >= q for every iteration -> the least of d over the box >= 1 or >= 0
    d, strict = (cexpr.add(q, cexpr.scale(p, -1)), op == "<") if op in ("<", "<=") else \
        (cexpr.add(p, cexpr.scale(q, -1)), op == ">")
    if not any(n in scope.counters for n in cexpr.names(d)):
        return None  # fixed over the nest: nothing to take out of the loop
    if any(n not in scope.counters and not scope.fixed(n) for n in cexpr.names(d)):
        return None
    parts, rest = [], d
    for v, (first, last) in scope.counters.items():
        got = cexpr.split(rest, v)
        if got is None:
            return None  # v squared
        coef, rest = got
        if not coef:
            continue
        if any(n in scope.counters for n in cexpr.names(coef)):
            return None  # kh * kw: not affine
        c = _wide(coef)
        if set(coef) == {()}:
            at = first if coef[()] > 0 else last
            parts.append(at if coef[()] == 1 else f"-({at})" if coef[()] == -1 else f"{coef[()]}LL * ({at})")
        else:
            lo, hi = f"({c}) * ({first})", f"({c}) * ({last})"  # (no min(): a name min may hide it)
            parts.append(f"({lo} < {hi} ? {lo} : {hi})")
    parts.append(_wide(rest))
    return f"({' + '.join(parts)} {'>= 1' if strict else '>= 0'})"


def _wide(p: dict) -> str:
    """A polynomial over fixed int names as a 64-bit C expression."""
    if not p:
        return "0LL"
    text = cexpr.show({tuple(f"(long long){n}" for n in m): c for m, c in p.items()})
    return text if any(m for m in p) else f"{text}LL"


def _without(data: bytes, nest: Node, drops: list[tuple[Node, Node, bool]], swaps: list[tuple[Node, str]]) -> str:
    """``nest``'s text with the dropped terms taken out of their tests (a test left with none: ``;`` for a
    ``continue``, the guarded statement alone otherwise) and the decided clamps and selects written as their value."""
    by_test: dict[int, tuple[Node, bool, list[Node]]] = {}
    for test, term, skip in drops:
        by_test.setdefault(test.id, (test, skip, []))[2].append(term)
    edits = []
    for test, skip, terms in by_test.values():
        cond = test.child_by_field_name("condition")
        kept = [t for t in sx.conjuncts(sx.clause_value(cond), "||" if skip else "&&") if t not in terms]
        if kept:
            joined = (" || " if skip else " && ").join(f"({sx.text(t)})" for t in kept)
            edits.append((cond.start_byte, cond.end_byte, f"({joined})".encode()))
        elif skip:
            edits.append((test.start_byte, test.end_byte, b";"))
        else:
            edits.append((test.start_byte, test.child_by_field_name("consequence").start_byte, b""))
    edits += [(n.start_byte, n.end_byte, t.encode()) for n, t in swaps]
    lo = nest.start_byte
    return sx.apply_edits(data[lo:nest.end_byte], [(a - lo, b - lo, r) for a, b, r in edits]).decode()
