"""How far a kernel's accesses reach, read from its body: what the scaffold (:mod:`.scaffold`) writes as a buffer's
shape and an index buffer's value range, in place of guesses.

- :class:`Ranges`: the lowest and highest value of an integer expression over the size symbols, through the kernel's
  locals (``int m = idx / H;``, ``int xx = min(max(x + k - 2, 0), W - 1);``), its loops (``for (int k = 0; k < 5;
  ++k)``: 0 to 4; ``d < D`` with ``#define D 64``: 0 to 63), its guards (``if (idx >= M * H) return;``, ``if (x < W
  && y < H) {...}``, ``i == H - 1`` in an early exit: ``i`` at most ``H - 2`` after it) and the launch's
  ``blockIdx``/``threadIdx`` where the launch is known; an index is read as a polynomial (:func:`.cexpr.poly`), each
  of its names and other parts (``idx / H``, ``idx % H``, ``min(a, b)``) given its range, the file's integer
  ``#define``s their values;
- :func:`accesses`: every place a pointer argument is read or written (``p[i]``, ``*p``, ``*(p + i)``, ``atomicAdd(&p[i],
  v)``, through local aliases ``const float* row = p + r * V;``: ``row[j]`` is ``p[r * V + j]``), None when one cannot
  be read (passed to a helper, stepped through a loop);
- :func:`extent`: a buffer's shape from the largest index its accesses reach, the dimensions from the strides of that
  index (``m * 2 * H + H + j`` with ``m < M``, ``j < H``: ``[M, 2 * H]``); an access at an index loaded from another
  buffer (``row[labels[r]]``) counts on that buffer's values and reaches nothing by itself;
- :func:`indexed_extent`: the dimension an integer buffer's loaded values index in another buffer (``row[labels[r]]``,
  row's stride-1 dimension: ``V``), so its values are drawn below it;
- :func:`bounded_loop`: the loop an integer buffer's values at ``p[e]`` and ``p[e + 1]`` start and bound (``for (int j =
  offsets[s]; j < offsets[s + 1]; ++j)``), so they are drawn as range starts, and the range of those values
  (:class:`Ranges`'s ``loaded``) bounds the indices of the buffers the loop reads.
"""
from __future__ import annotations

import re

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from .cexpr import (Node, Poly, add, as_condition, at_most, clause_value, conjuncts, constant, divide, mul, names, nonneg, operator,
                    poly, scale, split, substitute, text, uncast, unparen, walk)

# calls that take their arguments by value (math and conversion builtins, min/max, loads): a name passed to any other
# call may be changed through a reference parameter
PURE_CALL = re.compile(r"(?:std::)?(?:min|max|abs|f?min[fl]?|f?max[fl]?|f?abs[fl]?|u?min|u?max|sqrtf?|rsqrtf?|expf?|logf?|"
                        r"powf?|floorf?|ceilf?|__\w+|static_cast|int|float|double|size_t|ptxf_\w+)")
Range = tuple[Poly | None, Poly | None]  # (lowest, highest) value, both inclusive; None: not known
UNKNOWN: Range = (None, None)

_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}
_NEGATE = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}
_JUMPS = ("return_statement", "continue_statement", "break_statement")
_MIN_MAX = {"min": "min", "max": "max", "umin": "min", "umax": "max", "llmin": "min", "llmax": "max", "ullmin": "min",
            "ullmax": "max", "imin": "min", "imax": "max"}
_BUILTIN_LOW = {"threadIdx": 0, "blockIdx": 0, "blockDim": 1, "gridDim": 1}


def _lower(a: Poly | None, b: Poly | None) -> Poly | None:
    """The smaller of two bounds where it is proven, else None."""
    if a is None or b is None:
        return None
    return a if at_most(a, b) else b if at_most(b, a) else None


def _higher(a: Poly | None, b: Poly | None) -> Poly | None:
    """The larger of two bounds where it is proven, else None."""
    if a is None or b is None:
        return None
    return b if at_most(a, b) else a if at_most(b, a) else None


def _exits(stmt: Node) -> Node | None:
    """The condition of ``if (c) return;`` (``continue``, ``break``; also a braced block ending with one; no ``else``),
    else None: the statements after it run only where ``c`` is false."""
    if stmt.type != "if_statement" or stmt.child_by_field_name("alternative") is not None:
        return None
    then = stmt.child_by_field_name("consequence")
    if then is not None and then.type == "compound_statement":
        inner = [c for c in then.named_children if c.type != "comment"]
        then = inner[-1] if inner else None
    return clause_value(stmt.child_by_field_name("condition")) if then is not None and then.type in _JUMPS else None


class Ranges:
    """The ranges of a kernel body's integer expressions over the size symbols (module docstring).

    ``symbols``: the size symbols (integer parameters), each at least 1; ``builtins``: ranges of ``threadIdx.x``,
    ``blockDim.y``, ... from the launch (else ``blockIdx``/``threadIdx`` are at least 0, ``blockDim``/``gridDim`` at
    least 1, none with a highest value); ``constants``: the file's integer macros (``#define D 64``,
    :func:`.cmacros.integer_constants`), read as their values wherever they are written; ``loaded``: the range of the
    values loaded from some integer buffers (an offsets buffer's: 0 to its last), by the buffer's name."""

    def __init__(self, body: Node, symbols: Sequence[str], builtins: Mapping[str, Range] | None = None,
                 constants: Mapping[str, int] | None = None, loaded: Mapping[str, Range] | None = None):
        self.body, self.symbols, self.builtins = body, set(symbols), dict(builtins or {})
        self.loaded = dict(loaded or {})
        self.constants: dict[str, Poly] = {n: constant(v) for n, v in (constants or {}).items()}
        self.decls: dict[str, list[Node]] = {}  # name -> its init_declarators / declarations, in order
        self.writes: dict[str, list[Node]] = {}  # name -> assignments, increments and address-takings of it
        for n in walk(body):
            if n.type == "init_declarator" and n.child_by_field_name("declarator").type == "identifier":
                self.decls.setdefault(text(n.child_by_field_name("declarator")), []).append(n)
            elif n.type == "declaration":
                for d in n.children_by_field_name("declarator"):
                    if d.type == "identifier":
                        self.decls.setdefault(text(d), []).append(d)
            field = {"assignment_expression": "left", "update_expression": "argument"}.get(n.type)
            if n.type == "pointer_expression" and operator(n) == "&":
                field = "argument"
            target = unparen(n.child_by_field_name(field)) if field else None
            if n.type == "init_declarator" and n.child_by_field_name("declarator") is not None \
                    and n.child_by_field_name("declarator").type == "reference_declarator":
                target = unparen(n.child_by_field_name("value"))  # int& t = s; t = 2 * W;: s may change through t
            if target is not None and target.type == "identifier":
                self.writes.setdefault(text(target), []).append(n)
            if n.type == "argument_list" and n.parent is not None and n.parent.type == "call_expression" \
                    and not PURE_CALL.fullmatch(text(n.parent.child_by_field_name("function"))):
                for a in n.named_children:  # grow(s, W) with an int& parameter: s may change
                    a = unparen(a)
                    if a is not None and a.type == "identifier":
                        self.writes.setdefault(text(a), []).append(n)
        self._cache: dict[tuple, Range] = {}
        self._busy: set[tuple] = set()
        self.assumed: list[Poly] = []  # divisors over the sizes taken to be at least 1 (``OW = W - 2`` in ``v % OW``)

    # --- expressions ---------------------------------------------------------------------------------------------

    def read(self, *terms: Node) -> tuple[Poly | None, dict[str, Node]]:
        """The sum of ``terms`` as a polynomial over size symbols, variables and atoms (any other part by its text:
        ``idx / H``, ``labels[r]``; a constant by its value), and the atoms' nodes; None where a part is not an
        integer (a float literal)."""
        atoms: dict[str, Node] = {}

        def atom(n: Node) -> Poly:
            atoms[text(n)] = n
            return {(text(n),): 1}

        total: Poly | None = {}
        for t in terms:
            p = poly(t, self.constants, atom)
            total = None if total is None or p is None else add(total, p)
        return total, atoms

    def of(self, node: Node | None, site: Node | None = None) -> Range:
        """The range of the integer expression ``node``, its names read where ``site`` (default: ``node``) is."""
        node = uncast(node)
        if node is None:
            return UNKNOWN
        site = site or node
        p, atoms = self.read(node)
        if p is None:
            return UNKNOWN
        if atoms.get(text(node)) == node:
            return self._atom(node, site)
        return self.of_poly(p, atoms, site)

    def of_poly(self, p: Poly, atoms: Mapping[str, Node], site: Node) -> Range:
        """The range of a polynomial whose names are size symbols, variables read at ``site`` and ``atoms``
        (subexpressions by their text). A term of two or more variables needs each one's lowest value non-negative.
        A variable of one value over the sizes (``OD = D - 2``) counts as a size while the terms are bounded, then is
        replaced by its value (``OD * OH * OW`` reads as a product of sizes, not as three unsigned ranges); where it
        multiplies a variable, it is taken to be at least 1 unless that is proved (:attr:`assumed`)."""
        ranges = {n: self._atom(atoms[n], site) if n in atoms else self.name(n, site) for n in names(p) - self.symbols}
        exact = {n: r[0] for n, r in ranges.items() if r[0] is not None and r[0] == r[1]}
        sizes = self.symbols | set(exact)
        lo: Poly | None = {}
        hi: Poly | None = {}
        for m, c in p.items():
            factor: Poly = {tuple(n for n in m if n in sizes): c}
            var = [n for n in m if n not in sizes]
            if len(var) > 1 and not all(ranges[v][0] is not None and nonneg(ranges[v][0]) for v in var):
                return UNKNOWN
            if var:
                for n in set(m) & set(exact):
                    if not nonneg(add(exact[n], {(): -1})) and exact[n] not in self.assumed:
                        if not names(exact[n]):
                            return UNKNOWN  # a number below 1 scaling a variable: its sign is known, not handled
                        self.assumed.append(exact[n])
            low, high = factor, factor  # the term's value at the variables' lowest and highest values
            for v in var:
                low = None if low is None or ranges[v][0] is None else mul(low, ranges[v][0])
                high = None if high is None or ranges[v][1] is None else mul(high, ranges[v][1])
            if c < 0:
                low, high = high, low
            lo = None if lo is None or low is None else add(lo, low)
            hi = None if hi is None or high is None else add(hi, high)
        for n, by in exact.items():
            lo = None if lo is None else substitute(lo, n, by)
            hi = None if hi is None else substitute(hi, n, by)
        return lo, hi

    def exact(self, p: Poly, atoms: Mapping[str, Node], site: Node) -> dict[str, Poly]:
        """The variables of ``p`` (read at ``site``) that have one value over the sizes, with that value."""
        ranges = {n: self._atom(atoms[n], site) if n in atoms else self.name(n, site) for n in names(p) - self.symbols}
        return {n: r[0] for n, r in ranges.items() if r[0] is not None and r[0] == r[1]}

    def _atom(self, node: Node, site: Node) -> Range:
        """The range of a part of an index that is no polynomial: ``a / d``, ``a % d`` (``d`` a positive size
        expression), ``min``/``max`` of two, ``c ? a : b``, a load from a buffer of :attr:`loaded`; unknown for anything
        else (another load, a call)."""
        if node.type == "subscript_expression" and text(uncast(node.child_by_field_name("argument"))) in self.loaded:
            return self.loaded[text(uncast(node.child_by_field_name("argument")))]
        if node.type == "binary_expression" and operator(node) in ("/", "%"):
            (alo, ahi), (dlo, dhi) = self.of(node.child_by_field_name("left"), site), self.of(node.child_by_field_name("right"), site)
            if dlo is None or dlo != dhi or alo is None or not nonneg(alo):
                return UNKNOWN
            if not nonneg(add(dlo, {(): -1})):
                if not names(dlo):
                    return UNKNOWN  # a number below 1
                if dlo not in self.assumed:  # the kernel divides by it: at least 1 wherever it runs (an assumption)
                    self.assumed.append(dlo)
            if operator(node) == "%":
                return (alo, ahi) if ahi is not None and at_most(ahi, add(dlo, {(): -1})) else ({}, add(dlo, {(): -1}))
            return self._quotient(alo, ahi, dlo)
        if node.type == "call_expression":
            fn = _MIN_MAX.get(text(node.child_by_field_name("function")).split("::")[-1])
            args = [c for c in node.child_by_field_name("arguments").named_children if c.type != "comment"]
            if fn is None or len(args) != 2:
                return UNKNOWN
            (alo, ahi), (blo, bhi) = self.of(args[0], site), self.of(args[1], site)
            if fn == "min":
                return _lower(alo, blo), (ahi if bhi is None else bhi if ahi is None else _lower(ahi, bhi))
            return (alo if blo is None else blo if alo is None else _higher(alo, blo)), _higher(ahi, bhi)
        if node.type == "conditional_expression":
            (alo, ahi), (blo, bhi) = (self.of(node.child_by_field_name(f), site) for f in ("consequence", "alternative"))
            return _lower(alo, blo), _higher(ahi, bhi)
        return UNKNOWN

    @staticmethod
    def _quotient(lo: Poly, hi: Poly | None, d: Poly) -> Range:
        """``a / d`` for ``lo <= a <= hi``, ``lo >= 0``, ``d >= 1``: ``(hi + 1) / d - 1`` at most when ``d`` divides
        ``hi + 1`` (``idx < M * H``: ``idx / H < M``), the floor when both are numbers; else no highest value."""
        numbers = not names(lo) and not names(d) and (hi is None or not names(hi))
        k = d.get((), 0)
        low = constant(lo.get((), 0) // k) if numbers else {}
        if hi is None:
            return low, None
        if numbers:
            return low, constant(hi.get((), 0) // k)
        q = divide(add(hi, {(): 1}), d)
        return low, (add(q, {(): -1}) if q is not None else None)

    # --- names ---------------------------------------------------------------------------------------------------

    def name(self, name: str, site: Node) -> Range:
        """The range of the variable ``name`` where ``site`` is: a size symbol is itself; a launch builtin its range;
        a local its initialiser's (a counter of its own ``for`` loop: from its start, up or down), narrowed by the
        guards around ``site``; unknown for a local written anywhere else, or for another parameter."""
        if name in self.symbols:
            return ({(name,): 1},) * 2 if name not in self.writes else UNKNOWN
        if "." in name:
            base = name.split(".")[0]
            return self.builtins.get(name, (constant(_BUILTIN_LOW[base]), None) if base in _BUILTIN_LOW else UNKNOWN)
        key = (name, site.start_byte, site.end_byte, site.type)
        if key in self._cache:
            return self._cache[key]
        if key in self._busy:
            return UNKNOWN  # a guard that reads, in the end, the variable it bounds
        self._busy.add(key)
        try:
            found = self._declared(name, site)
            self._cache[key] = found
        finally:
            self._busy.discard(key)
        return found

    def declaration(self, name: str, site: Node) -> Node | None:
        """The declaration of ``name`` in scope at ``site``: the last one before it whose block holds it."""
        best = None
        for d in self.decls.get(name, []):
            scope = d.parent.parent  # the block (or the for loop) the declaration is in
            if d.start_byte < site.start_byte and scope is not None and scope.start_byte <= site.start_byte < scope.end_byte:
                best = d
        return best

    def _declared(self, name: str, site: Node) -> Range:
        decl = self.declaration(name, site)
        if decl is None:
            return UNKNOWN
        value = decl.child_by_field_name("value") if decl.type == "init_declarator" else None
        writes = [w for w in self.writes.get(name, []) if decl.end_byte <= w.start_byte < decl.parent.parent.end_byte]
        if not writes:
            base = self.of(value) if value is not None else UNKNOWN
        else:
            base = self._counter(decl, value, writes)
            if base is None:
                return UNKNOWN
        return self._narrowed(name, base, site)

    def _counter(self, decl: Node, value: Node | None, writes: list[Node]) -> Range | None:
        """The range of a ``for`` loop's own counter (declared in its head, written only by its update: ``++``,
        ``+= step`` with ``step >= 0``; or ``--``, ``-=``): from its start up (no highest value) or down (no lowest);
        None for any other variable written after its declaration."""
        loop = decl.parent.parent
        update = loop.child_by_field_name("update") if loop.type == "for_statement" else None
        if update is None or value is None or not all(update.start_byte <= w.start_byte < update.end_byte for w in writes):
            return None
        signs = set()
        for w in writes:
            op = operator(w)
            if op in ("++", "--"):
                signs.add(op[0])
            elif op in ("+=", "-=") and (low := self.of(w.child_by_field_name("right"))[0]) is not None and nonneg(low):
                signs.add(op[0])
            else:
                return None
        start = self.of(value)
        return (start[0], None) if signs == {"+"} else (None, start[1]) if signs == {"-"} else None

    # --- guards --------------------------------------------------------------------------------------------------

    def _facts(self, site: Node) -> list[tuple[Node, bool, Node]]:
        """The conditions known where ``site`` is, each (comparison, holds, where its names are read): the conditions
        of the ``if`` and ``?:`` branches, ``for`` bodies and ``&&`` right operands around it (each operand of a ``&&``
        true; in an ``else``, each operand of a ``||`` false), and of the early exits before it in each block around it
        (``if (c) return;``: each operand of ``c``'s ``||`` false). ``where`` is the comparison itself, or for a ``?:``
        condition read again (``cexpr.as_condition``: a node of another tree), the condition as the kernel has it."""
        facts: list[tuple[Node, bool, Node]] = []
        child, up = site, site.parent
        while up is not None and child != self.body:
            if up.type == "if_statement":
                cond = clause_value(up.child_by_field_name("condition"))
                if child == up.child_by_field_name("consequence"):
                    facts += [(c, True, c) for c in conjuncts(cond)]
                elif child == up.child_by_field_name("alternative"):
                    facts += [(c, False, c) for c in conjuncts(cond, "||")]
            elif up.type == "for_statement" and child == up.child_by_field_name("body"):
                facts += [(c, True, c) for c in conjuncts(up.child_by_field_name("condition"))]
            elif up.type == "conditional_expression" and child != up.child_by_field_name("condition"):
                where = up.child_by_field_name("condition")
                cond = as_condition(where)  # (a ?: condition the grammar misreads: its names read where it is)
                holds = child == up.child_by_field_name("consequence")
                facts += [(c, holds, where if cond is not unparen(where) else c)
                          for c in conjuncts(cond, "&&" if holds else "||")]
            elif up.type == "binary_expression" and operator(up) == "&&" and child == up.child_by_field_name("right"):
                facts += [(c, True, c) for c in conjuncts(up.child_by_field_name("left"))]
            elif up.type == "compound_statement":
                for stmt in up.named_children:
                    if stmt.start_byte >= child.start_byte:
                        break
                    if (cond := _exits(stmt)) is not None:
                        facts += [(c, False, c) for c in conjuncts(cond, "||")]
            child, up = up, up.parent
        return facts

    def _narrowed(self, name: str, base: Range, site: Node) -> Range:
        """``base`` narrowed by the comparisons of ``name`` known at ``site`` (:meth:`_facts`): ``name < e`` caps it at
        ``e``'s highest value less one, ..., ``name != e`` moves an end equal to ``e`` in by one."""
        lo, hi = base
        unequal = []
        for cond, holds, where in self._facts(site):
            cond = unparen(cond)
            if cond.type != "binary_expression" or operator(cond) not in _FLIP:
                continue
            op, left, right = operator(cond), uncast(cond.child_by_field_name("left")), uncast(cond.child_by_field_name("right"))
            if right is not None and right.type == "identifier" and text(right) == name:
                op, left, right = _FLIP[op], right, left
            if left is None or left.type != "identifier" or text(left) != name:
                continue
            op = op if holds else _NEGATE[op]
            elo, ehi = self.of(right, where)
            if op == "!=":
                unequal.append((elo, ehi))
            elif op in ("<", "<=", "==") and ehi is not None:
                cap = add(ehi, {(): -1}) if op == "<" else ehi
                hi = cap if hi is None or at_most(cap, hi) or not at_most(hi, cap) else hi
            if op in (">", ">=", "==") and elo is not None:
                floor = add(elo, {(): 1}) if op == ">" else elo
                lo = floor if lo is None or at_most(lo, floor) or not at_most(floor, lo) else lo
        for elo, ehi in unequal:
            if elo is not None and elo == ehi:
                hi = add(hi, {(): -1}) if hi == elo else hi
                lo = add(lo, {(): 1}) if lo == elo else lo
        return lo, hi


# --- accesses ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Access:
    """One read or write of a pointer argument: ``node`` (``p[i]``, ``*p``, the atomic's call), ``terms`` whose sum is
    the element's index (an alias's offsets, then the index; none: element 0)."""

    node: Node
    terms: tuple[Node, ...]

    @property
    def line(self) -> int:
        return self.node.start_point[0] + 1


def _atomic_target(n: Node) -> bool:
    """``n`` is the first argument of an ``atomic*`` call."""
    up = n.parent
    return up is not None and up.type == "argument_list" and up.named_children[:1] == [n] \
        and text(up.parent.child_by_field_name("function")).startswith("atomic")


def _alias(n: Node) -> str | None:
    """The local that ``n`` initialises when ``n`` is a pointer's initialiser (``T* q = n;``), else None."""
    up = n.parent
    if up is None or up.type != "init_declarator" or up.child_by_field_name("value") != n:
        return None
    d = up.child_by_field_name("declarator")
    while d is not None and d.type == "pointer_declarator":
        d = d.child_by_field_name("declarator")
    return text(d) if d is not None and d.type == "identifier" else None


def accesses(body: Node, name: str, ranges: Ranges, _prefix: tuple[Node, ...] = (), _depth: int = 0) -> list[Access] | None:
    """Every access of pointer ``name`` in ``body`` (module docstring), None when one cannot be read: the pointer
    passed on, an alias written again (``q += N``), an index of two subscripts, a subtracted offset."""
    out: list[Access] = []
    for n in walk(body):
        if n.type != "identifier" or text(n) != name:
            continue
        up = n.parent
        if up.type in ("pointer_declarator", "array_declarator", "declaration", "parameter_declaration") or (
                up.type == "init_declarator" and up.child_by_field_name("declarator") == n):
            continue  # a declaration of the name
        if up.type == "binary_expression" and operator(up) in ("==", "!=", "<", "<=", ">", ">=", "&&", "||") or \
                up.type == "condition_clause" or (up.type == "unary_expression" and operator(up) == "!") or \
                (up.type == "conditional_expression" and up.child_by_field_name("condition") == n):
            continue  # tests the pointer (if (bias), bias ? ... : ...)
        holder, terms = n, ()
        if up.type == "subscript_expression" and up.child_by_field_name("argument") == n:
            idx = [c for c in up.child_by_field_name("indices").named_children if c.type != "comment"]
            if len(idx) != 1:
                return None
            holder, terms = up, (idx[0],)
            if up.parent is not None and up.parent.type == "pointer_expression" and operator(up.parent) == "&":
                holder = up.parent  # &p[i]: an address, read below like p + i
            else:
                out.append(Access(up, _prefix + terms))
                continue
        elif up.type == "binary_expression" and operator(up) == "+":
            other = up.child_by_field_name("right") if up.child_by_field_name("left") == n else up.child_by_field_name("left")
            holder, terms = up, (other,)
            while holder.parent is not None and holder.parent.type == "parenthesized_expression":
                holder = holder.parent
        elif up.type == "pointer_expression" and operator(up) == "*":
            out.append(Access(up, _prefix))
            continue
        target = holder.parent
        if target is not None and target.type == "pointer_expression" and operator(target) == "*" and holder is not n:
            out.append(Access(target, _prefix + terms))  # *(p + i)
        elif _atomic_target(holder):
            out.append(Access(holder.parent.parent, _prefix + terms))
        elif (alias := _alias(holder)) is not None and _depth < 3 and alias not in ranges.writes:
            more = accesses(body, alias, ranges, _prefix + terms, _depth + 1)
            if more is None:
                return None
            out += more
        else:
            return None
    return out


# --- extents -----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Extent:
    """A buffer's shape read from its accesses: ``dims`` (outermost first) and the ``strides`` of each, ``access``
    the one reaching the largest index; ``split``: some dimensions are a product of sizes taken apart (a flat index
    over ``H * W``: ``[H, W]``), in signature order, which the index cannot tell; ``named``: the dimensions that are
    not one term are the values of the kernel's own locals (``OW = W - 2`` used as a stride), not a guard's bound
    the reading missed."""

    dims: tuple[Poly, ...]
    strides: tuple[Poly, ...]
    access: Access
    split: bool = False
    named: bool = False

    @property
    def size(self) -> Poly:
        """The number of elements: the product of the dimensions."""
        total: Poly = {(): 1}
        for d in self.dims:
            total = mul(total, d)
        return total

    @property
    def plain(self) -> bool:
        """Every dimension one term (``M``, ``2 * H``, ``5``): no ``H - 1``, whose ``- 1`` usually stands for a guard
        the reading missed; or the others are the values of the kernel's locals (:attr:`named`)."""
        return self.named or all(len(d) == 1 for d in self.dims)


def _load(ranges: Ranges, name: str, atoms: Mapping[str, Node], site: Node) -> Node | None:
    """The load (``q[i]``) that an index's part ``name`` is: the atom itself, or a local never written again declared
    from one (``int t = labels[r];``); else None."""
    node = atoms.get(name)
    if node is None and name in ranges.decls:
        decl = ranges.declaration(name, site)
        if decl is not None and decl.type == "init_declarator" and name not in ranges.writes:
            node = uncast(decl.child_by_field_name("value"))
    return node if node is not None and node.type == "subscript_expression" else None


def _loaded_from(ranges: Ranges, name: str, atoms: Mapping[str, Node], site: Node) -> str | None:
    """The buffer whose element an index's part ``name`` is (``q[i]``: ``q``, :func:`_load`); else None."""
    node = _load(ranges, name, atoms, site)
    return text(uncast(node.child_by_field_name("argument"))) if node is not None else None


def extent(ranges: Ranges, found: Sequence[Access], order: Sequence[str], indices: Collection[str] = ()) -> Extent | None:
    """The shape the accesses ``found`` reach (module docstring), None when one reaches an index without a highest
    value (but one loaded from a buffer of ``indices``, the integer buffers, whose values are drawn in range), no two
    can be ordered, or none reaches anything by itself. ``order``: the size symbols in signature order, for a flat
    product's dimensions."""
    reached: list[tuple[Access, Poly, Poly, Mapping[str, Node]]] = []
    for a in found:
        p, atoms = ranges.read(*a.terms)
        if p is None:
            return None
        hi = ranges.of_poly(p, atoms, a.node)[1]
        if hi is None:
            if any(_loaded_from(ranges, n, atoms, a.node) in indices for n in names(p)):
                continue  # an index loaded from an integer buffer: in range by that buffer's values
            return None
        reached.append((a, p, hi, atoms))
    if not reached:
        return None
    best = next((r for r in reached if all(at_most(o[2], r[2]) for o in reached)), None)
    if best is None:
        return None
    access, p, hi, atoms = best
    total = add(hi, {(): 1})
    positive = nonneg(add(total, {(): -1}))
    dims = _chained(p, total, ranges.symbols) if positive else None
    exact = ranges.exact(p, atoms, access.node) if dims is None else {}
    if exact:  # strides of locals of one value each (OH * OW, OH = H - 2): ordered over them, divided by their values
        dims = _chained(p, total, ranges.symbols, exact)
        if dims is not None and not positive and not all(nonneg(add(d, {(): -1})) or d in ranges.assumed for d in dims):
            dims = None  # (each dimension at least 1, proved or taken so where the kernel divides by it)
    if dims is None and not positive:
        return None
    dims = dims or [total]
    outer = _flat(dims[0], order)  # an outermost product of sizes: a flat index over them, one dimension each
    dims = outer + dims[1:]
    strides, step = [], {(): 1}
    for d in reversed(dims):
        strides.insert(0, step)
        step = mul(step, d)
    return Extent(tuple(dims), tuple(strides), access, split=len(outer) > 1, named=bool(exact))


def _chained(p: Poly, total: Poly, symbols: set[str], values: Mapping[str, Poly] | None = None) -> list[Poly] | None:
    """The dimensions of ``total`` elements from the strides of the index ``p`` (each variable's coefficient, a
    product of sizes), largest first, each dividing the one before: ``m * 2 * H + H + j`` of ``2 * M * H``: ``[M, 2 *
    H]``. None where a coefficient is not such a product or they do not chain. ``values``: names of ``p`` that stand
    for one value each (``OW = W - 2``), ordered as sizes (at least 1) and divided by their values (``total`` is over
    the sizes alone)."""
    values = dict(values or {})
    sizes = symbols | set(values)
    strides: list[Poly] = []
    for v in names(p) - sizes:
        parts = split(p, v)
        if parts is None or not parts[0] or names(parts[0]) - sizes or not nonneg(parts[0]):
            return None
        if parts[0] not in strides:
            strides.append(parts[0])
    strides = sorted(strides, key=lambda s: sum(1 for o in strides if at_most(o, s)), reverse=True)
    if any(not at_most(b, a) for a, b in zip(strides, strides[1:])):
        return None
    dims, rest = [], total
    for s in strides:
        for n, by in values.items():
            s = substitute(s, n, by)
        if s == {(): 1}:
            continue
        q = divide(rest, s)
        if q is None:
            return None
        dims.append(q)
        rest = s
    return dims + [rest] if dims else None  # one stride of 1: a flat index


def _flat(total: Poly, order: Sequence[str]) -> list[Poly]:
    """A flat index's dimensions: one per size of a product (``M * H``: ``[M, H]``, in signature order), else the
    whole number of elements as one."""
    if len(total) == 1:
        (m, c), = total.items()
        if c == 1 and m:
            return [{(n,): 1} for n in sorted(m, key=lambda n: (order.index(n) if n in order else len(order), n))]
    return [total]


def indexed_extent(ranges: Ranges, buffer: str, shapes: Mapping[str, tuple[Extent, Sequence[Access]]]) -> tuple[Poly, str, Access] | None:
    """``(extent, name, access)`` of the dimension that values loaded from integer ``buffer`` index in another buffer
    (``name``): the loaded value's stride in that access is the stride of one of ``name``'s dimensions (``shapes``:
    each buffer's extent and accesses), every term of the index added, none a constant; None when no access reads
    it so, or two disagree."""
    found: list[tuple[Poly, str, Access]] = []
    for other, (ext, acc) in shapes.items():
        if other == buffer:
            continue
        for a in acc:
            p, atoms = ranges.read(*a.terms)
            if p is None or () in p or any(c < 0 for c in p.values()):
                continue
            for n in names(p):
                if _loaded_from(ranges, n, atoms, a.node) != buffer:
                    continue
                parts = split(p, n)
                if parts is not None and parts[0] in ext.strides:
                    found.append((ext.dims[ext.strides.index(parts[0])], other, a))
    if not found or any(f[0] != found[0][0] for f in found):
        return None
    return found[0]


# --- ranges a buffer's values bound --------------------------------------------------------------------------------

def _element(ranges: Ranges, node: Node | None, site: Node) -> tuple[str, Poly] | None:
    """``(buffer, index)`` of the load ``node``'s value is (``offsets[s]``, or a local never written again declared
    from it: ``int start = offsets[s];``), the index a polynomial; else None."""
    p, atoms = ranges.read(node) if node is not None else (None, {})
    if p is None or list(p.values()) != [1] or len(next(iter(p))) != 1:
        return None  # not one name
    load = _load(ranges, next(iter(p))[0], atoms, site)
    idx = [c for c in load.child_by_field_name("indices").named_children if c.type != "comment"] if load is not None else []
    index = ranges.read(idx[0])[0] if len(idx) == 1 else None
    return (text(uncast(load.child_by_field_name("argument"))), index) if index is not None else None


def _loop_start(loop: Node) -> tuple[str, Node] | None:
    """``(counter, start)`` of a ``for`` loop that sets one variable first (``int j = a``, ``j = a``), else None."""
    init = loop.child_by_field_name("initializer")
    if init is not None and init.type == "declaration":
        decls = init.children_by_field_name("declarator")
        init = decls[0] if len(decls) == 1 and decls[0].type == "init_declarator" else None
        field = ("declarator", "value")
    else:
        field = ("left", "right")
        init = init if init is not None and init.type == "assignment_expression" and operator(init) == "=" else None
    counter = uncast(init.child_by_field_name(field[0])) if init is not None else None
    return (text(counter), init.child_by_field_name(field[1])) if counter is not None and counter.type == "identifier" else None


def bounded_loop(ranges: Ranges, buffer: str) -> Node | None:
    """The first ``for`` loop whose counter runs from the value loaded from ``buffer`` at ``p[e]`` to below the one at
    ``p[e + 1]`` (``for (int j = offsets[s]; j < offsets[s + 1]; ++j)``, through locals ``int end = offsets[s +
    1];`` too), the condition that bounds it: ``buffer`` holds the starts of consecutive ranges and the end of the last
    (CSR row pointers), its values never decreasing. None when no loop reads it so."""
    for loop in walk(ranges.body):
        head = _loop_start(loop) if loop.type == "for_statement" else None
        start = _element(ranges, head[1], loop) if head is not None else None
        if start is None or start[0] != buffer:
            continue
        for cond in conjuncts(loop.child_by_field_name("condition")):
            cond = unparen(cond)
            if cond.type != "binary_expression" or operator(cond) not in ("<", ">"):
                continue
            counter, bound = (cond.child_by_field_name(f) for f in (("left", "right") if operator(cond) == "<" else ("right", "left")))
            end = _element(ranges, bound, loop) if uncast(counter).type == "identifier" and text(uncast(counter)) == head[0] else None
            if end is not None and end[0] == buffer and add(end[1], scale(start[1], -1)) == {(): 1}:
                return cond
    return None
