"""The loop-carried reduction recogniser: which variables a loop body only accumulates into, and how.

A loop can be split across lanes only when every variable it carries from one iteration to the next
(declared outside the body, written inside it) is an associative, commutative accumulation whose
partial results can be combined afterwards. This module reads one loop body's syntax tree and
returns those accumulators, or None when any carried variable is something else (a recurrence, a
pointer bump, a flag read back in the loop): such a loop is left alone.

Recognised updates of an accumulator ``v`` (``e`` never mentions a variable the loop carries; the
update may sit under ``if`` statements whose conditions do not mention ``v``):

=========  ==========================================================================  ==========
kind       updates                                                                     combine
=========  ==========================================================================  ==========
``sum``    ``v += e``, ``v -= e``, ``v = v + e``, ``v = e + v``, ``v = v - e``, ``v++``   ``a + b``
``prod``   ``v *= e``, ``v = v * e``, ``v = e * v``                                     ``a * b``
``max``    ``v = fmaxf(v, e)`` (``fmax``, ``max``, either order), ``v = e > v ? e : v``,  the same
           ``if (e > v) v = e;`` (any of ``> >= < <=`` with the operands' sides)       form
``min``    the same with the comparisons reversed, ``fminf``, ``fmin``, ``min``
``arg``    ``if (e > v) { v = e; k = j; }`` (max or min, ``k`` an index: ``j``, ``j + c``,  best, then
           ``j - c``), the pair ``(v, k)``; ``>``/``<``: first index wins ties, else last  the index
=========  ==========================================================================  ==========

Every occurrence of ``v`` (and ``k``) in the body must belong to one of these updates, and all of
``v``'s updates must be of one kind: a value read in the loop (``y[j] = v``) or an update of two
kinds is a dependence the recogniser does not prove safe.

Tuples (``tuples=True``): variables updated together, each statement of the loop body that reads one of them while
writing another linking them. The body's top-level statements that mention the tuple (or a temporary computed from it)
are evaluated symbolically (:mod:`.symbolic`) and what they leave in each variable must be, whatever the spelling
(temporaries, ``op=``, statement order, ``if``/``else``), one of (``e`` a value the loop does not change between its
reads: a local never written after its declaration, ``x[j]`` when the loop writes no memory):

===========  ====================================================================================================
``softmax``  ``(m, s)``: ``m = max(m, e)`` (``fmaxf``/``fmax``/``max``, or a comparison picking the larger),
             ``s = s * X(m_old - m) + X(e - m)`` with ``X`` one of ``expf``, ``__expf``, ``exp``; or, under
             ``if (e > m)`` (``>=``, either side), ``s = s * X(m - e) + 1; m = e;`` else ``s += X(e - m)``
             (the ``1`` may be ``X(e - e)``, the else's ``s`` may be ``s * X(m - m)``)
``welford``  ``(n, mean, M2)``: ``n = n + 1``, ``mean = mean + (e - mean) / n_new`` (or ``(n_old * mean + e) /
             n_new``), ``M2 = M2 + (e - mean_old) * (e - mean_new)`` (or ``+ (e - mean_old)^2 * n_old / n_new``),
             ``n`` an integer or a float, every division a floating-point one; or ``(mean, M2)`` with the
             count ``j + c`` from the loop index (``j - a + 1`` over ``j`` from ``a``; ``counts`` are those
             expressions, ``count_start`` the count before the first iteration)
===========  ====================================================================================================

A carried variable that the caller proves dead after the loop (``dead_after``) and that the body sets once, ``v = e;``
as a top-level statement before reading it (a temporary declared before the loop, C89 style) is read as a local of the
body. Anything else is refused with the reason (``why``): a wrong sign, a missing rescale, a temporary also used for
something else (``y[j] = m_new``), a count updated under a condition, a ``continue`` in the loop (it could skip part of
an update), a value that changes between its reads. Not recognised at all: bitwise accumulations, and anything
written through a pointer that is not an array access.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import permutations

from . import syntax as sx
from .affine import add, poly
from .base import LOAD_FUNCS, STORE_FUNCS
from .symbolic import Evaluator, Expr, NotStraight, branch, conditions, free, replace, same, show
from .syntax import Node

MAX_FUNCS = frozenset({"fmaxf", "fmax", "max"})
MIN_FUNCS = frozenset({"fminf", "fmin", "min"})
FMA_FUNCS = frozenset({"fmaf", "fma", "__fmaf_rn", "__fma_rn"})  # acc = fmaf(a, b, acc): a sum of products
GREATER = {">": ("max", True), ">=": ("max", False), "<": ("min", True), "<=": ("min", False)}
FLIP = {">": "<", "<": ">", ">=": "<=", "<=": ">="}


@dataclass
class Accumulator:
    """One loop-carried accumulator.

    ``name``: the variable; ``kind``: ``"sum" | "prod" | "max" | "min" | "arg" | "softmax" | "welford"``;
    ``combine``: a C expression of ``{a}`` and ``{b}`` (two partial results) for sum/prod/max/min; for ``arg``,
    ``index`` (the index variable), ``direction`` (``"max"``/``"min"``) and ``first`` (ties go to the
    smaller index). A tuple (softmax, welford) is listed under one of its variables and names them all in
    ``members`` by role (``{"max": m, "sum": s}``; ``{"count": n or None, "mean": mean, "m2": M2}``), with
    ``exp`` (the softmax's exponential) or, for a count taken from the loop index, ``counts`` (those expressions'
    nodes) and ``count_start`` (the count before the first iteration). ``updates``: the statements that update it
    (for tests and diagnostics).
    """

    name: str
    kind: str
    combine: str = ""
    index: str | None = None
    direction: str | None = None
    first: bool = True
    updates: list[Node] = field(default_factory=list)
    members: dict[str, str | None] = field(default_factory=dict)
    exp: str | None = None
    counts: list[Node] = field(default_factory=list)
    count_start: int = 0

    @property
    def identity(self) -> str | None:
        """The value a lane other than the first starts from (sum 0, product 1), or None when the
        initial value may be shared by every lane (max, min, arg: combining it twice changes nothing) or the
        accumulator is a tuple (whose lanes' starting values the pass that splits the loop chooses)."""
        return {"sum": "0", "prod": "1"}.get(self.kind)

    @property
    def names(self) -> list[str]:
        """Every variable the accumulator carries (a tuple's members, an arg reduction's value and index)."""
        if self.members:
            return [v for v in self.members.values() if v is not None]
        return [self.name] + ([self.index] if self.index else [])


def loop_accumulators(body: Node, carried: set[str], loop_var: str, *, tuples: bool = False, start: Node | None = None,
                      why: list[str] | None = None, dead_after: set[str] = frozenset()) -> dict[str, Accumulator] | None:
    """The accumulators of a loop ``body`` whose carried variables are ``carried``, or None if one is not recognised.

    ``carried``: names declared outside the body and written in it (the loop variable excluded);
    ``loop_var``: the loop's index, which an ``arg`` reduction's index must follow. ``tuples``: also recognise the
    tuples of the module docstring (online softmax, Welford); a pass that combines them asks for them. ``start``:
    the loop variable's first value (a count taken from the loop index needs it). ``why``: when given, the reasons
    a tuple was not recognised are appended to it. ``dead_after``: carried variables whose value no code outside the
    loop reads (the caller's proof); one of them that the body assigns once, ``v = e;`` as a top-level statement
    before any read of it (a scratch variable declared before the loop), is read as a local of the body. Returns a
    dict by name (an ``arg`` reduction appears once, under its value's name; a tuple under its ``name``).
    """
    scratch = _scratch(body, carried & set(dead_after))
    carried = carried - scratch
    occurrences: dict[str, list[Node]] = {v: [] for v in carried}
    for n in sx.walk(body):
        if n.type == "identifier" and sx.text(n) in occurrences:
            occurrences[sx.text(n)].append(n)
    consumed: set[int] = set()
    found: dict[str, Accumulator] = {}
    spans: list[tuple[int, int]] = []  # the tuples' statements, left out of the one-variable walk
    for acc in (_tuple_accumulators(body, carried, loop_var, start, why if why is not None else [], scratch) if tuples else []):
        found[acc.name] = acc
        spans += [(u.start_byte, u.end_byte) for u in acc.updates]
        consumed.update(x.id for v in acc.names for x in occurrences[v])
    for n in sx.walk(body):
        if any(a <= n.start_byte < b for a, b in spans):
            continue
        upd = _update(n, carried, loop_var)
        if upd is None:
            continue
        acc, nodes = upd
        if any(x.id in consumed for x in nodes):
            return None
        consumed.update(x.id for x in nodes)
        prev = found.get(acc.name)
        if prev is None:
            found[acc.name] = acc
        elif (prev.kind, prev.combine, prev.index, prev.direction, prev.first) != (acc.kind, acc.combine, acc.index, acc.direction, acc.first):
            return None  # two kinds of update of one variable (or two arg forms)
        else:
            prev.updates += acc.updates
    for v, occ in occurrences.items():
        if any(x.id not in consumed for x in occ):
            return None  # read or written outside a recognised update
    indices = {a.index for a in found.values() if a.kind == "arg"}
    if indices & set(found) or len(indices) != sum(a.kind == "arg" for a in found.values()):
        return None  # an index also accumulated, or one index shared by two arg reductions
    names = [v for a in found.values() for v in a.names]
    if len(names) != len(set(names)) or set(names) != carried:
        return None
    return found


# -- tuples: online softmax, Welford ------------------------------------------------------------------------------

EXP_FUNCS = frozenset({"expf", "__expf", "exp"})
# calls a stable value may make: the math library, conversions and the read-only loads
PURE_CALLS = sx.VALUE_FUNCS | LOAD_FUNCS | MAX_FUNCS | MIN_FUNCS | EXP_FUNCS
ONE = ("num", 1.0)
SOFTMAX_FORM = ("an online softmax (m = max(m, e); s = s * exp(m_old - m) + exp(e - m); or if (e > m) "
                "{ s = s * exp(m - e) + 1; m = e; } else s += exp(e - m))")
WELFORD_FORM = ("a Welford update (n += 1; mean += (e - mean) / n; M2 += (e - mean_old) * (e - mean); "
                "or mean and M2 alone with the count j + c from the loop index)")


def _tuple_accumulators(body: Node, carried: set[str], j: str, start: Node | None, why: list[str],
                        scratch: set[str]) -> list[Accumulator]:
    """The tuples among ``carried`` (see the module docstring); a group of linked variables that is none of them is
    left to the one-variable recogniser (an arg max's pair is one), its reason appended to ``why``. ``scratch``:
    variables read as locals of the body (see :func:`loop_accumulators`)."""
    stmts = [c for c in (sx.statements(body) if body.type == "compound_statement" else [body]) if c.type != "comment"]
    reach: dict[str, set[str]] = {}  # temporaries -> the carried variables their value reads
    links: list[set[str]] = []
    for st in stmts:
        ids = sx.identifiers(st)
        k = (ids & carried).union(*(reach[t] for t in ids if t in reach))
        if k and (st.type == "declaration" or _scratch_assigned(st, scratch)):
            for name in sx.declared_names(st) | ({_scratch_assigned(st, scratch)} - {None}):
                reach[name] = k
        links.append(k)
    groups: list[set[str]] = []
    for k in links:
        if len(k) < 2:
            continue
        joined = [g for g in groups if g & k]
        groups = [g for g in groups if not g & k] + [set(k).union(*joined)]
    out = []
    for group in groups:
        mine = [st for st, k in zip(stmts, links) if k & group]
        names = ", ".join(sorted(group))
        try:
            acc = _tuple(group, mine, body, j, start, stmts, scratch)
        except NotStraight as e:
            why.append(f"{names}: updated together, not recognised: {e}")
            continue
        if isinstance(acc, str):
            why.append(f"{names}: updated together, but {acc}")
            continue
        out.append(acc)
    return out


def _tuple(group: set[str], mine: list[Node], body: Node, j: str, start: Node | None, stmts: list[Node],
           scratch: set[str]) -> Accumulator | str:
    """The tuple ``group`` updated by the statements ``mine``, or why it is not one."""
    if sx.contains_type(body, ("continue_statement",)):
        return "the loop has a continue (it could skip part of the update)"
    written = sx.written_names(body) - scratch  # a scratch variable is assigned once, before its reads
    stores = _writes_memory(body)

    def atom_ok(node: Node) -> str | None:
        for n in sx.walk(node):
            if n.type in ("assignment_expression", "update_expression", "comma_expression"):
                return f"{sx.text(node)!r} writes something"
            if n.type == "call_expression" and sx.call_name(n) not in PURE_CALLS:
                return f"{sx.text(node)!r} calls {sx.text(n.child_by_field_name('function'))!r}"
            if stores and (n.type == "subscript_expression" or (n.type == "pointer_expression" and sx.operator(n) == "*")
                           or sx.call_name(n) in LOAD_FUNCS):
                return f"{sx.text(node)!r} reads memory the loop also writes"
        changing = sx.identifiers(node) & written
        if changing:
            return f"{sx.text(node)!r} reads {', '.join(sorted(changing))}, written in the loop"
        return None

    fn = body
    while fn.parent is not None and fn.type != "function_definition":
        fn = fn.parent
    ev = Evaluator(group, atom_ok, scratch, sx.Types(fn))
    final = ev.run(mine)
    shown = "; ".join(f"{v} = {show(final[v])}" for v in sorted(group))
    updates = list(mine)
    if len(group) == 2:
        a, b = sorted(group)
        for m, s in ((a, b), (b, a)):
            f = _online_softmax(final[m], final[s], m, s)
            if f is not None:
                return Accumulator(m, "softmax", members={"max": m, "sum": s}, exp=f, updates=updates)
        for mean, m2 in ((a, b), (b, a)):
            key = _welford_indexed(final[mean], final[m2], mean, m2)
            if key is None:
                continue
            counts, c0 = _index_counts(ev.atoms[key], j, start, stmts, mine)
            if isinstance(counts, str):
                return counts
            return Accumulator(mean, "welford", members={"count": None, "mean": mean, "m2": m2}, counts=counts,
                               count_start=c0, updates=updates)
        return f"neither {SOFTMAX_FORM} nor {WELFORD_FORM}: {shown}"
    if len(group) == 3:
        for n, mean, m2 in permutations(sorted(group)):
            if _welford(final[n], final[mean], final[m2], n, mean, m2):
                return Accumulator(mean, "welford", members={"count": n, "mean": mean, "m2": m2}, updates=updates)
        return f"not {WELFORD_FORM}: {shown}"
    return f"{len(group)} variables updated together (an online softmax has 2, a Welford update 2 or 3)"


def _scratch(body: Node, names: set[str]) -> set[str]:
    """Those of ``names`` that ``body`` assigns exactly once, ``v = e;`` (``e`` free of ``v``) as a top-level statement,
    and mentions nowhere before it: each iteration sets them before reading them, like locals of the body."""
    stmts = [c for c in (sx.statements(body) if body.type == "compound_statement" else [body]) if c.type != "comment"]
    out = set()
    for v in names:
        writes = [n for n in sx.walk(body) if v in sx.written_names(n) and n.type in ("assignment_expression",
                                                                                        "update_expression", "pointer_expression")]
        first = next((n for n in sx.walk(body) if sx.is_ident(n, v)), None)
        if len(writes) != 1 or first is None or not any(_scratch_assigned(st, {v}) for st in stmts):
            continue
        if first == sx.unparen(writes[0].child_by_field_name("left")) and v not in sx.identifiers(writes[0].child_by_field_name("right")):
            out.add(v)
    return out


def _scratch_assigned(st: Node, scratch: set[str]) -> str | None:
    """The variable of ``scratch`` that the statement ``st`` assigns, as ``v = e;``, else None."""
    e = st.named_children[0] if st.type == "expression_statement" and st.named_child_count == 1 else None
    if e is None or e.type != "assignment_expression" or sx.operator(e) != "=":
        return None
    left = sx.unparen(e.child_by_field_name("left"))
    return sx.text(left) if sx.is_ident(left) and sx.text(left) in scratch else None


def _writes_memory(node: Node) -> bool:
    """``node`` stores through a pointer or an array, or calls an atomic or a store intrinsic."""
    for n in sx.walk(node):
        target = n.child_by_field_name("left") if n.type == "assignment_expression" else (
            n.child_by_field_name("argument") if n.type == "update_expression" else None)
        if target is not None and not sx.is_ident(sx.unparen(target)):
            return True
        name = sx.call_name(n)
        if name and (name.startswith("atomic") or name in STORE_FUNCS):
            return True
    return False


def _subtrees(e: Expr):
    yield e
    for c in e[1:]:
        if isinstance(c, tuple):
            yield from _subtrees(c)


def _online_softmax(fm: Expr, fs: Expr, m: str, s: str) -> str | None:
    """The exponential function when ``(fm, fs)`` (what the statements leave in ``m`` and ``s``) is one step of an
    online softmax over some element ``e`` (see the module docstring), else None."""
    M, S = ("var", m), ("var", s)
    exps = {x[1] for x in _subtrees(fs) if x[0] == "call" and x[1] in EXP_FUNCS}
    if len(exps) != 1:
        return None
    f = exps.pop()

    def X(e: Expr) -> Expr:
        return ("call", f, e)

    conds = conditions(fm) + [c for c in conditions(fs) if c not in conditions(fm)]
    if not conds:
        if fm[0] != "call" or fm[1] not in MAX_FUNCS or len(fm) != 4:
            return None
        others = [x for x in fm[2:] if not same(x, M)]
        if len(others) != 1 or not free(others[0]):
            return None
        e = others[0]
        return f if same(fs, ("+", ("*", S, X(("-", M, fm))), X(("-", e, fm)))) else None
    if len(conds) != 1 or conds[0][0] != "cmp" or conds[0][1] not in (">", ">="):
        return None
    c = conds[0]
    if same(c[3], M) and free(c[2]):
        e, big = c[2], True  # e > m: the branch taken is the one where e is the new maximum
    elif same(c[2], M) and free(c[3]):
        e, big = c[3], False  # m > e: the branch not taken is
    else:
        return None

    def settle(x: Expr, larger: bool) -> Expr:  # max(m, e) where the condition says which is larger
        for g in MAX_FUNCS:
            x = replace(x, ("call", g, M, e), e if larger else M)
        return x

    m_big, m_small = settle(branch(fm, c, big), True), settle(branch(fm, c, not big), False)
    s_big, s_small = settle(branch(fs, c, big), True), settle(branch(fs, c, not big), False)
    rescaled = ("*", S, X(("-", M, e)))
    ok = (same(m_big, e) and same(m_small, M)
          and any(same(s_big, ("+", rescaled, one)) for one in (ONE, X(("-", e, e))))
          and any(same(s_small, ("+", kept, X(("-", e, M)))) for kept in (S, ("*", S, X(("-", M, M))))))
    return f if ok else None


def _welford(fn: Expr, fmean: Expr, fm2: Expr, n: str, mean: str, m2: str) -> bool:
    """``(fn, fmean, fm2)`` is one Welford step over some element ``e``: ``n + 1``; ``mean + (e - mean) / (n + 1)`` or
    ``(n * mean + e) / (n + 1)``; ``M2 + (e - mean) * (e - mean_new)`` or ``M2 + (e - mean)^2 * n / (n + 1)`` (``n``
    also spelled ``(n + 1) - 1``: the count read after its update)."""
    N, MU, Q = ("var", n), ("var", mean), ("var", m2)
    n1 = ("+", N, ONE)
    if not same(fn, n1):
        return False
    for x in _subtrees(fmean):
        if not (x[0] == "-" and same(x[2], MU) and free(x[1])) and not (x[0] == "+" and free(x[2])):
            continue
        e = x[1] if x[0] == "-" else x[2]
        d = ("-", e, MU)
        olds = (N, ("-", n1, ONE))
        means = [("+", MU, ("/", d, n1))] + [("/", ("+", ("*", old, MU), e), n1) for old in olds]
        m2s = [("+", Q, ("*", d, ("-", e, fmean)))] + [("+", Q, w) for old in olds for w in (
            ("/", ("*", ("*", d, d), old), n1), ("*", ("*", d, d), ("/", old, n1)))]
        if any(same(fmean, m) for m in means) and any(same(fm2, m) for m in m2s):
            return True
    return False


def _welford_indexed(fmean: Expr, fm2: Expr, mean: str, m2: str) -> str | None:
    """The count's atom key when ``(fmean, fm2)`` is a Welford step whose count ``d`` is an expression of the loop
    (``mean + (e - mean) / d``, ``M2 + (e - mean) * (e - mean_new)``), else None."""
    MU, Q = ("var", mean), ("var", m2)
    for x in _subtrees(fmean):
        if x[0] == "/" and x[2][0] == "atom" and x[1][0] == "-" and same(x[1][2], MU) and free(x[1][1]):
            e, d = x[1][1], x[2]
            if same(fmean, ("+", MU, ("/", ("-", e, MU), d))) and same(fm2, ("+", Q, ("*", ("-", e, MU), ("-", e, fmean)))):
                return d[1]
    return None


def _index_counts(nodes: list[Node], j: str, start: Node | None, stmts: list[Node], mine: list[Node]) -> tuple[list[Node] | str, int]:
    """The expressions to replace by a per-lane count, and the count before the first iteration, for a Welford count
    read at ``nodes``: ``j + c`` (through a local ``T n = j + c;`` used by the update alone), the same count ``c0 >= 0``
    at ``j = start``; else ``(why not, 0)``."""
    if start is None:
        return "the count comes from the loop index, and the loop's start is not known", 0
    targets, starts = [], set()
    for node in nodes:
        target = node
        if sx.is_ident(node) and not sx.is_ident(node, j):
            target = _local_initialiser(sx.text(node), stmts, mine)
            if target is None:
                return f"the count {sx.text(node)!r} is not a local j + c read by the update alone", 0
        c0 = _count_start(target, j, start)
        if c0 is None:
            return f"the count {sx.text(target)!r} is not {j} + c with a count >= 0 before the first iteration", 0
        targets.append(target)
        starts.add(c0)
    if len(starts) != 1:
        return "two different counts", 0
    return targets, starts.pop()


def _local_initialiser(name: str, stmts: list[Node], mine: list[Node]) -> Node | None:
    """The initialiser of ``name`` when it is declared once in the body's top-level statements, never written, and
    read only in ``mine``; else None."""
    decls = [d for st in stmts if st.type == "declaration" for d in st.children_by_field_name("declarator")
             if sx.text(sx.innermost_identifier(d)) == name]
    if len(decls) != 1 or decls[0].type != "init_declarator" or not sx.is_ident(decls[0].child_by_field_name("declarator")):
        return None
    spans = [(m.start_byte, m.end_byte) for m in mine]
    for st in stmts:
        for n in sx.walk(st):
            if sx.is_ident(n, name) and n.parent is not decls[0] and n != decls[0].child_by_field_name("declarator") \
                    and not any(a <= n.start_byte < b for a, b in spans):
                return None
    if any(name in sx.written_names(st) for st in stmts):
        return None
    return decls[0].child_by_field_name("value")


def _count_start(node: Node, j: str, start: Node) -> int | None:
    """For ``node`` = ``j + c`` (a polynomial with ``j``'s coefficient 1; ``c`` may be an integral float literal): the
    count ``j + c - 1`` at ``j = start``, when it is a constant >= 0; else None."""
    p = poly(node)
    if p is None:
        u = sx.uncast(node)
        if u is None or u.type != "binary_expression" or sx.operator(u) != "+":
            return None
        a, b = sx.uncast(u.child_by_field_name("left")), sx.uncast(u.child_by_field_name("right"))
        if not sx.is_ident(a, j):
            a, b = b, a
        v = sx.literal_value(b) if b is not None and b.type == "number_literal" else None
        if not sx.is_ident(a, j) or v is None or float(v) != int(v):
            return None
        p = {(j,): 1, (): int(v)} if int(v) else {(j,): 1}
    if p.get((j,)) != 1 or any(j in mono for mono in p if mono != (j,)):
        return None
    ps = poly(start)
    if ps is None:
        return None
    c = add(add(add(p, {(j,): -1}), ps), {(): -1})
    if any(mono != () for mono in c):
        return None
    c0 = c.get((), 0)
    return c0 if c0 >= 0 else None


def _update(n: Node, carried: set[str], j: str) -> tuple[Accumulator, list[Node]] | None:
    """The accumulator update rooted at ``n`` and the identifier nodes it accounts for, or None."""
    if n.type == "update_expression":
        v = sx.unparen(n.child_by_field_name("argument"))
        if sx.is_ident(v) and sx.text(v) in carried and sx.text(n).replace(" ", "").count("++"):
            return Accumulator(sx.text(v), "sum", "{a} + {b}", updates=[n]), [v]
        return None
    if n.type == "assignment_expression":
        return _assignment(n, carried)
    if n.type == "if_statement":
        return _conditional_max(n, carried, j)
    return None


def _free_of(node: Node | None, names: set[str]) -> bool:
    return node is not None and not (sx.identifiers(node) & names)


def _assignment(n: Node, carried: set[str]) -> tuple[Accumulator, list[Node]] | None:
    left, right, op = sx.unparen(n.child_by_field_name("left")), n.child_by_field_name("right"), sx.operator(n)
    if not sx.is_ident(left) or sx.text(left) not in carried:
        return None
    v = sx.text(left)
    if _inside_arg_if(n):
        return None  # part of an if (e > v) { v = e; k = j; } matched from its if statement
    if op in ("+=", "-=") and _free_of(right, carried):
        return Accumulator(v, "sum", "{a} + {b}", updates=[n]), [left]
    if op == "*=" and _free_of(right, carried):
        return Accumulator(v, "prod", "{a} * {b}", updates=[n]), [left]
    if op != "=":
        return None
    r = sx.unparen(right)
    if r is None:
        return None
    if r.type == "binary_expression" and sx.operator(r) in ("+", "-", "*"):
        a, b = sx.unparen(r.child_by_field_name("left")), sx.unparen(r.child_by_field_name("right"))
        kind = "prod" if sx.operator(r) == "*" else "sum"
        combine = "{a} * {b}" if kind == "prod" else "{a} + {b}"
        if sx.is_ident(a, v) and _free_of(b, carried):
            return Accumulator(v, kind, combine, updates=[n]), [left, a]
        if sx.operator(r) != "-" and sx.is_ident(b, v) and _free_of(a, carried):
            return Accumulator(v, kind, combine, updates=[n]), [left, b]
        return None
    if r.type == "call_expression" and sx.call_name(r) in FMA_FUNCS:
        args = [sx.unparen(x) for x in sx.call_args(r)]
        if len(args) == 3 and sx.is_ident(args[2], v) and _free_of(args[0], carried) and _free_of(args[1], carried):
            return Accumulator(v, "sum", "{a} + {b}", updates=[n]), [left, args[2]]
        return None
    if r.type == "call_expression" and sx.call_name(r) in MAX_FUNCS | MIN_FUNCS:
        args = [sx.unparen(x) for x in sx.call_args(r)]
        if len(args) != 2:
            return None
        mine = [x for x in args if sx.is_ident(x, v)]
        other = [x for x in args if not sx.is_ident(x, v)]
        if len(mine) != 1 or len(other) != 1 or not _free_of(other[0], carried):
            return None
        f = sx.call_name(r)
        return Accumulator(v, "max" if f in MAX_FUNCS else "min", f + "({a}, {b})", updates=[n]), [left, mine[0]]
    if r.type == "conditional_expression":
        cond = sx.unparen(r.child_by_field_name("condition"))
        yes, no = sx.unparen(r.child_by_field_name("consequence")), sx.unparen(r.child_by_field_name("alternative"))
        kind = _compare_kind(cond, v, carried)
        if kind is None:
            return None
        direction, e_text, cond_v = kind
        if sx.is_ident(no, v) and sx.text(yes) == e_text:
            picked_v = no
        elif sx.is_ident(yes, v) and sx.text(no) == e_text:
            # v = v > e ? v : e keeps v when it compares better: the same max, spelled the other way
            direction = "min" if direction == "max" else "max"
            picked_v = yes
        else:
            return None
        op = ">" if direction == "max" else "<"
        return Accumulator(v, direction, f"(({{b}}) {op} ({{a}}) ? ({{b}}) : ({{a}}))", updates=[n]), [left, cond_v, picked_v]
    return None


def _compare_kind(cond: Node | None, v: str, carried: set[str]) -> tuple[str, str, Node] | None:
    """For a comparison of ``e`` against ``v``: ``(direction, e's text, v's node)``, where direction
    says which ``e`` the comparison lets replace ``v`` (``e > v``: "max"). None otherwise."""
    if cond is None or cond.type != "binary_expression" or sx.operator(cond) not in GREATER:
        return None
    a, b, op = sx.unparen(cond.child_by_field_name("left")), sx.unparen(cond.child_by_field_name("right")), sx.operator(cond)
    if sx.is_ident(b, v) and _free_of(a, carried):
        e, vnode = a, b
    elif sx.is_ident(a, v) and _free_of(b, carried):
        e, vnode, op = b, a, FLIP[op]
    else:
        return None
    return GREATER[op][0], sx.text(e), vnode


def _inside_arg_if(assign: Node) -> bool:
    """``assign`` is one of the assignments of an ``if (e > v) {...}`` update (matched from the if)."""
    node = assign.parent
    while node is not None and node.type in ("expression_statement", "compound_statement"):
        node = node.parent
    if node is None or node.type != "if_statement" or node.child_by_field_name("alternative") is not None:
        return False
    cond = sx.unparen(node.child_by_field_name("condition").child_by_field_name("value"))
    return cond is not None and cond.type == "binary_expression" and sx.operator(cond) in GREATER and any(
        sx.is_ident(sx.unparen(cond.child_by_field_name(s)), sx.text(sx.unparen(assign.child_by_field_name("left"))))
        for s in ("left", "right"))


def _conditional_max(n: Node, carried: set[str], j: str) -> tuple[Accumulator, list[Node]] | None:
    """``if (e > v) v = e;`` (max/min) or ``if (e > v) { v = e; k = j; }`` (arg max/min)."""
    if n.child_by_field_name("alternative") is not None:
        return None
    cond = sx.unparen(n.child_by_field_name("condition").child_by_field_name("value"))
    if cond is None or cond.type != "binary_expression" or sx.operator(cond) not in GREATER:
        return None
    cons = n.child_by_field_name("consequence")
    stmts = sx.statements(cons) if cons.type == "compound_statement" else [cons]
    assigns = []
    for s in stmts:
        e = s.named_children[0] if s.type == "expression_statement" and s.named_child_count == 1 else None
        if e is None or e.type != "assignment_expression" or sx.operator(e) != "=":
            return None
        target = sx.unparen(e.child_by_field_name("left"))
        if not sx.is_ident(target) or sx.text(target) not in carried:
            return None
        assigns.append((sx.text(target), target, sx.unparen(e.child_by_field_name("right")), e))
    for v, vtarget, value, assign in assigns:
        kind = _compare_kind(cond, v, carried)
        if kind is None or sx.text(value) != kind[1]:
            continue
        direction, _, cond_v = kind
        strict = sx.operator(cond) in (">", "<")
        if len(assigns) == 1:
            op = ">" if direction == "max" else "<"
            return Accumulator(v, direction, f"(({{b}}) {op} ({{a}}) ? ({{b}}) : ({{a}}))", updates=[n]), [cond_v, vtarget]
        if len(assigns) != 2:
            return None
        k, ktarget, kvalue, _ = next(a for a in assigns if a[0] != v) if assigns[0][0] != assigns[1][0] else (None,) * 4
        if k is None or not _follows_index(kvalue, j):
            return None
        return (Accumulator(v, "arg", index=k, direction=direction, first=strict, updates=[n]),
                [cond_v, vtarget, ktarget])
    return None


def _follows_index(node: Node | None, j: str) -> bool:
    """``node`` is ``j``, ``j + c`` or ``j - c`` (``c`` free of ``j``): an index increasing with ``j``."""
    node = sx.uncast(node)
    if sx.is_ident(node, j):
        return True
    if node is None or node.type != "binary_expression" or sx.operator(node) not in ("+", "-"):
        return False
    a, b = sx.uncast(node.child_by_field_name("left")), node.child_by_field_name("right")
    if sx.is_ident(a, j) and j not in sx.identifiers(b):
        return True
    return sx.operator(node) == "+" and sx.is_ident(sx.uncast(b), j) and j not in sx.identifiers(a)
