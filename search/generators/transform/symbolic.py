"""Straight-line code as expression trees: what a few statements leave in some variables, in terms of their values before.

:mod:`.reductions` recognises a tuple of accumulators updated together (an online softmax's (max, sum), a Welford
(count, mean, M2)) by evaluating the statements that update it symbolically, then comparing what they leave in each
variable with the known updates, whatever the spelling (temporaries, compound assignments, statement order, an
``if``/``else``). Trees are tuples:

==============================  ==============================================================================
``("var", name)``               a tracked variable's value before the statements
``("num", value)``              a number literal (``1``, ``1.0f``: ``("num", 1.0)``)
``("atom", key)``               any other expression that mentions no tracked variable nor temporary (``x[j]``,
                                ``v``, ``j + 1``), by its text without spaces; its nodes are kept in ``atoms``
``(op, a, b)``                  ``op`` in ``+ - * /``
``("neg", a)``                  ``-a``
``("cmp", op, a, b)``           ``op`` in ``> >= < <= == !=``
``("call", f, a, ...)``         a call of ``f``
``("cond", c, a, b)``           ``c ? a : b``, also what an ``if``/``else`` leaves in a variable
==============================  ==============================================================================

Casts to ``float``/``double`` are read through (they change rounding, not the algebra). Refused (:class:`NotStraight`,
with the reason): a division not known to be a floating-point one (neither side ``float``/``double`` by the kernel's
declared types: it may be an integer division), any other cast of a tracked value, an assignment to anything but a
tracked variable, a temporary that is not ``float``/``double`` or is written after its declaration, a loop, a call
with a tracked argument that is not ``f(...)`` of plain arguments. Whether an atom is a stable value (the same wherever it is read in the
statements) is the caller's question (``atom_ok``).
"""
from __future__ import annotations

from collections.abc import Callable

from . import syntax as sx
from .syntax import Node

Expr = tuple
ARITH = ("+", "-", "*", "/")
COMPARE = ("<", "<=", ">", ">=", "==", "!=")
FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}
COMMUTATIVE_CALLS = frozenset({"fmaxf", "fmax", "max", "fminf", "fmin", "min"})
FLOAT_TYPES = frozenset({"float", "double"})
COMPOUND = {"+=": "+", "-=": "-", "*=": "*", "/=": "/"}


class NotStraight(Exception):
    """The statements are not straight-line code this module evaluates (the message says what)."""


class Evaluator:
    """Evaluates statements over ``tracked`` variables (their values before: ``("var", name)``).

    ``atom_ok(node)``: None when ``node`` (an expression mentioning no tracked variable) is a stable value, else why
    not. ``scratch``: variables the statements may set with ``v = e;`` as if declaring them (temporaries declared
    before). After :meth:`run`, ``env`` maps each tracked variable to its value as a tree, and ``atoms`` each atom's
    key to the nodes it was read from."""

    def __init__(self, tracked: set[str], atom_ok: Callable[[Node], str | None], scratch: set[str] = frozenset(),
                 types: sx.Types | None = None):
        self.tracked = set(tracked)
        self.scratch = set(scratch)
        self.atom_ok = atom_ok
        self.types = types  # a division is read only where an operand is known to be float or double
        self.env: dict[str, Expr] = {v: ("var", v) for v in tracked}
        self.atoms: dict[str, list[Node]] = {}

    def run(self, stmts: list[Node]) -> dict[str, Expr]:
        """Evaluates ``stmts`` in order; returns the tracked variables' values. Raises :class:`NotStraight`."""
        for s in stmts:
            self.statement(s)
        return {v: self.env[v] for v in self.tracked}

    def statement(self, s: Node) -> None:
        t = s.type
        if t == "comment":
            return
        if t == "declaration":
            ctype = " ".join(w for w in sx.type_text(s.child_by_field_name("type")).split() if w != "const")
            for d in s.children_by_field_name("declarator"):
                if d.type != "init_declarator" or not sx.is_ident(d.child_by_field_name("declarator")):
                    raise NotStraight(f"a declaration without a plain initialised name: {sx.text(s)!r}")
                name = sx.text(d.child_by_field_name("declarator"))
                value = self.expr(d.child_by_field_name("value"))
                if ctype not in FLOAT_TYPES:
                    raise NotStraight(f"the temporary {name!r} is a {ctype!r}, not float or double")
                self.env[name] = value
        elif t == "expression_statement":
            if s.named_child_count != 1:
                raise NotStraight(f"not one expression: {sx.text(s)!r}")
            self.effect(s.named_children[0])
        elif t == "compound_statement":
            outer = set(self.env)
            for c in sx.statements(s):
                self.statement(c)
            self.env = {k: v for k, v in self.env.items() if k in outer}
        elif t == "if_statement":
            cond = self.expr(s.child_by_field_name("condition").child_by_field_name("value"))
            before = dict(self.env)
            branches = []
            for f in ("consequence", "alternative"):
                self.env = dict(before)
                c = s.child_by_field_name(f)
                if c is not None:
                    self.statement(c.named_children[-1] if c.type == "else_clause" else c)
                branches.append(self.env)
            yes, no = branches
            self.env = {k: yes[k] if same(yes[k], no[k]) else ("cond", cond, yes[k], no[k]) for k in before}
        else:
            raise NotStraight(f"a {t.replace('_', ' ')} among the updates (line {s.start_point[0] + 1})")

    def effect(self, e: Node) -> None:
        if e.type == "assignment_expression":
            left, op = sx.unparen(e.child_by_field_name("left")), sx.operator(e)
            if sx.is_ident(left) and sx.text(left) in self.scratch and op == "=":
                self.env[sx.text(left)] = self.expr(e.child_by_field_name("right"))
                return
            if not sx.is_ident(left) or sx.text(left) not in self.tracked:
                raise NotStraight(f"{sx.text(e)!r} writes what is not one of the updated variables")
            v = sx.text(left)
            if op == "/=" and not (self.types is not None and self.types.of(left) in FLOAT_TYPES):
                raise NotStraight(f"{sx.text(e)!r} may be an integer division ({v} is not known to be float)")
            value = self.expr(e.child_by_field_name("right"))
            if op == "=":
                self.env[v] = value
            elif op in COMPOUND:
                self.env[v] = (COMPOUND[op], self.env[v], value)
            else:
                raise NotStraight(f"the operator {op!r} in {sx.text(e)!r}")
            return
        if e.type == "update_expression":
            arg = sx.unparen(e.child_by_field_name("argument"))
            if not sx.is_ident(arg) or sx.text(arg) not in self.tracked:
                raise NotStraight(f"{sx.text(e)!r} writes what is not one of the updated variables")
            op = "+" if "++" in sx.text(e) else "-"
            self.env[sx.text(arg)] = (op, self.env[sx.text(arg)], ("num", 1.0))
            return
        raise NotStraight(f"{sx.text(e)!r} is not an assignment")

    def expr(self, node: Node | None) -> Expr:
        """``node`` as a tree over the current values."""
        node = sx.unparen(node)
        if node is None:
            raise NotStraight("an empty expression")
        if not (sx.identifiers(node) & set(self.env)):
            return self.atom(node)
        t = node.type
        if t == "identifier":
            return self.env[sx.text(node)]
        if t == "cast_expression":
            ctype = " ".join(sx.type_text(node.child_by_field_name("type")).split())
            if ctype not in FLOAT_TYPES:
                raise NotStraight(f"a cast to {ctype!r} of an updated value: {sx.text(node)!r}")
            return self.expr(node.child_by_field_name("value"))
        if t == "binary_expression" and sx.operator(node) in ARITH + COMPARE:
            op = sx.operator(node)
            if op == "/" and not any(self.types is not None and self.types.of(node.child_by_field_name(f)) in FLOAT_TYPES
                                     for f in ("left", "right")):
                raise NotStraight(f"{sx.text(node)!r} may be an integer division (neither side is known to be float)")
            a, b = self.expr(node.child_by_field_name("left")), self.expr(node.child_by_field_name("right"))
            return (op, a, b) if op in ARITH else ("cmp", op, a, b)
        if t == "unary_expression" and sx.operator(node) in ("-", "+"):
            a = self.expr(node.child_by_field_name("argument"))
            return ("neg", a) if sx.operator(node) == "-" else a
        if t == "call_expression" and sx.call_name(node) is not None:
            return ("call", sx.call_name(node), *(self.expr(a) for a in sx.call_args(node)))
        if t == "conditional_expression":
            return ("cond", *(self.expr(node.child_by_field_name(f)) for f in ("condition", "consequence", "alternative")))
        raise NotStraight(f"{sx.text(node)!r} ({t.replace('_', ' ')}) in an update")

    def atom(self, node: Node) -> Expr:
        why = self.atom_ok(node)
        if why is not None:
            raise NotStraight(why)
        if node.type == "number_literal" and sx.literal_value(node) is not None:
            return ("num", float(sx.literal_value(node)))
        key = "".join(sx.text(node).split())
        self.atoms.setdefault(key, []).append(node)
        return ("atom", key)


def canon(e: Expr) -> Expr:
    """``e`` with the operands of ``+``, ``*`` and max/min calls in a fixed order and ``a < b`` read as ``b > a``."""
    if e[0] in ("var", "num", "atom"):
        return e
    if e[0] == "cmp":
        op, a, b = e[1], canon(e[2]), canon(e[3])
        if op in ("<", "<="):
            op, a, b = FLIP[op], b, a
        elif op in ("==", "!=") and repr(b) < repr(a):
            a, b = b, a
        return ("cmp", op, a, b)
    if e[0] == "call":
        args = [canon(a) for a in e[2:]]
        if e[1] in COMMUTATIVE_CALLS:
            args.sort(key=repr)
        return ("call", e[1], *args)
    args = [canon(a) for a in e[1:]]
    if e[0] in ("+", "*"):
        args.sort(key=repr)
    return (e[0], *args)


def same(a: Expr, b: Expr) -> bool:
    """``a`` and ``b`` are the same tree up to the order of commutative operands."""
    return a == b or canon(a) == canon(b)


def free(e: Expr) -> bool:
    """``e`` reads no tracked variable's value."""
    return e[0] != "var" and all(free(c) for c in e[1:] if isinstance(c, tuple))


def conditions(e: Expr) -> list[Expr]:
    """The distinct conditions (canonical) of the ``cond`` nodes in ``e``."""
    out: list[Expr] = []
    stack = [e]
    while stack:
        x = stack.pop()
        if x[0] == "cond" and canon(x[1]) not in out:
            out.append(canon(x[1]))
        stack.extend(c for c in x[1:] if isinstance(c, tuple))
    return out


def branch(e: Expr, cond: Expr, taken: bool) -> Expr:
    """``e`` where ``cond`` (canonical) is ``taken``: each ``cond`` node on it replaced by the branch it picks."""
    if e[0] == "cond" and canon(e[1]) == cond:
        return branch(e[2] if taken else e[3], cond, taken)
    return tuple(branch(c, cond, taken) if isinstance(c, tuple) else c for c in e)


def replace(e: Expr, old: Expr, new: Expr) -> Expr:
    """``e`` with every subtree the same as ``old`` replaced by ``new``."""
    if same(e, old):
        return new
    return tuple(replace(c, old, new) if isinstance(c, tuple) else c for c in e)


def show(e: Expr) -> str:
    """``e`` as C-like text (for refusal messages)."""
    k = e[0]
    if k == "var":
        return e[1]
    if k == "num":
        return f"{e[1]:g}"
    if k == "atom":
        return e[1]
    if k == "neg":
        return f"-{show(e[1])}"
    if k == "cmp":
        return f"({show(e[2])} {e[1]} {show(e[3])})"
    if k == "call":
        return f"{e[1]}({', '.join(show(a) for a in e[2:])})"
    if k == "cond":
        return f"({show(e[1])} ? {show(e[2])} : {show(e[3])})"
    return f"({show(e[1])} {k} {show(e[2])})"
