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
kinds is a dependence the recogniser does not prove safe. Not recognised (the loop is refused):
an online softmax's rescaled sum or a Welford update (two accumulators updated together), bitwise
accumulations, and anything written through a pointer that is not an array access.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import syntax as sx
from .syntax import Node

MAX_FUNCS = frozenset({"fmaxf", "fmax", "max"})
MIN_FUNCS = frozenset({"fminf", "fmin", "min"})
GREATER = {">": ("max", True), ">=": ("max", False), "<": ("min", True), "<=": ("min", False)}
FLIP = {">": "<", "<": ">", ">=": "<=", "<=": ">="}


@dataclass
class Accumulator:
    """One loop-carried accumulator.

    ``name``: the variable; ``kind``: ``"sum" | "prod" | "max" | "min" | "arg"``; ``combine``: a C
    expression of ``{a}`` and ``{b}`` (two partial results) for sum/prod/max/min; for ``arg``,
    ``index`` (the index variable), ``direction`` (``"max"``/``"min"``) and ``first`` (ties go to the
    smaller index). ``updates``: the statements that update it (for tests and diagnostics).
    """

    name: str
    kind: str
    combine: str = ""
    index: str | None = None
    direction: str | None = None
    first: bool = True
    updates: list[Node] = field(default_factory=list)

    @property
    def identity(self) -> str | None:
        """The value a lane other than the first starts from (sum 0, product 1), or None when the
        initial value may be shared by every lane (max, min, arg: combining it twice changes nothing)."""
        return {"sum": "0", "prod": "1"}.get(self.kind)


def loop_accumulators(body: Node, carried: set[str], loop_var: str) -> dict[str, Accumulator] | None:
    """The accumulators of a loop ``body`` whose carried variables are ``carried``, or None if one is not recognised.

    ``carried``: names declared outside the body and written in it (the loop variable excluded);
    ``loop_var``: the loop's index, which an ``arg`` reduction's index must follow. Returns a dict by
    name (an ``arg`` reduction appears once, under its value's name).
    """
    occurrences: dict[str, list[Node]] = {v: [] for v in carried}
    for n in sx.walk(body):
        if n.type == "identifier" and sx.text(n) in occurrences:
            occurrences[sx.text(n)].append(n)
    consumed: set[int] = set()
    found: dict[str, Accumulator] = {}
    for n in sx.walk(body):
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
    if set(found) | indices != carried:
        return None
    return found


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
