"""``modstep``: a loop whose iterations a divisibility test filters -> a loop that steps over the accepted ones only.

A transposed convolution written as a gather (one thread an output) tests every tap for the input row it lands on::

    for (int kh = 0; kh < K; kh++) {
        int th = oh + pad - kh;
        if (th < 0 || th % stride != 0) continue;       // only every stride-th tap reaches this output row
        ...
    }

Of ``K`` iterations, ``K / stride`` pass the test (a quarter of a 2-D window's at stride 2, an eighth of a 3-D one's);
each rejected one still pays its division. The same filter appears in strided upsampling, dilated gathers and
"every k-th element" loops. :class:`ModStepPass` rewrites the loop to visit the accepted iterations only (the
"phase decomposition" of a transposed convolution, done per output)::

    for (int kh = ptxf_mod_first(0, oh + pad, ptxf_mod_step(stride)); kh < K; kh += ptxf_mod_step(stride)) {
        int th = oh + pad - kh;
        if (th < 0 || th % stride != 0) continue;       // kept: stride is not a positive literal
        ...

(``ptxf_mod_step``: ``|s|``, 1 for 0; ``ptxf_mod_first(lo, t, m)``: the first ``v >= lo`` with ``v = t (mod m)``; ``...64``
for a 64-bit counter.) The
canonical perfect nest (perfect_nest.py sinks ``kh``'s test into the ``kw`` loop's body) is read too: a test of an
outer loop's counter found in the body of the inner loop its body ends with.

Exact: the test accepts ``v`` when ``s`` divides ``a * v + b``; for ``a = +-1`` that is ``v = -a * b (mod |s|)``; the new
loop starts at the first such ``v`` at or after the old start and steps by ``|s|``, so it visits every accepted
iteration, in the same order; for another integer ``a`` (a dilation, after ``specialise`` made it a literal) and a
literal ``s``, with ``g = gcd(a, s)``: ``v = (-b / g) * inv(a / g) (mod s / g)`` where ``g`` divides ``b`` (none
accepted where it does not: the test, kept when ``g > 1``, rejects those visited); and the statements of a rejected one before the test are declarations free of calls and
assignments (nothing is lost by skipping them). The test itself is dropped where ``s`` is a positive integer literal
(or a ``#define`` of one); otherwise it stays (a ``% s`` per accepted iteration, none per rejected one; ``specialise``
then versions ``s`` on its bench value), the step is ``|s|`` (1 for ``s = 0``, whose division the original leaves
undefined: no endless loop). Every name the test reads is a signed integer (an unsigned difference wraps: the test
would read another number).

Applies to ``for (int v = L; v < U; v++)`` (``<=``, ``++v``, ``v += 1``; ``v`` declared in the header, never written in
the body) whose body opens with declarations and ``if (...) continue;`` tests free of calls and assignments, then either

- ``if (A || E % s != 0 || B) continue;`` (``E % s``, ``0 != E % s`` too), or
- ``if (A && E % s == 0 && B) ...`` (``!(E % s)``, ``0 == E % s`` too) with no ``else``, the last statement of its block,

or, as the block's last statement, a counted ``for`` loop or an ``if`` without ``else`` (both free of calls and
assignments in their tests) whose body opens so in turn (a rejected iteration then does nothing). ``E``, read through
those declarations, is ``c * v + b`` (``c = +-1``, or any integer with a literal ``s``) with ``b`` and ``s`` names
and literals the loop never writes nor declares
(subexpressions free of ``v``, of calls and of memory reads read as a whole: ``(idx / OW) % OH``). The disjuncts
and conjuncts are free of calls and assignments too (dropping one changes no side effect). Loops in a lambda, and
kernels with ``goto`` or labels, are left as written.
"""
from __future__ import annotations

import math
import re

from ptxfactory.harness import cexpr

from . import syntax as sx
from .base import Unit
from .expand import CONSTANTS_NOTE
from .syntax import Node

def _helpers(t: str, suffix: str) -> dict[str, str]:
    return {
        f"ptxf_mod_step{suffix}": f"""\
static __device__ __forceinline__ {t} ptxf_mod_step{suffix}({t} s)
{{   // |s|; 1 for s = 0, whose divisibility test the original leaves undefined: a step that never stalls the loop
    return s > 0 ? s : s < 0 ? -s : ({t})1;
}}""",
        f"ptxf_mod_first{suffix}": f"""\
static __device__ __forceinline__ {t} ptxf_mod_first{suffix}({t} lo, {t} target, {t} m)
{{   // the first v >= lo with v = target (mod m), m > 0
    const {t} r = (target - lo) % m;
    return lo + (r < 0 ? r + m : r);
}}""",
    }


# the helpers by the loop counter's width: int (32-bit and narrower counters), long long (64-bit ones)
HELPERS = {"": _helpers("int", ""), "64": _helpers("long long", "64")}
_SIGNED = sx.INT_TYPES - sx.UNSIGNED_TYPES
_EFFECTS = ("call_expression", "assignment_expression", "update_expression", "comma_expression")


class ModStepPass:
    """Loops filtered by ``E % s`` -> loops stepping ``s`` from the first accepted iteration (module docstring)."""

    name = "modstep"
    group = "modstep"  # optional: chains with and without it (transform/__init__.py)
    exact = True
    restructures = False  # (it says why not, but changes no thread's share of the work)

    def why_not(self, unit: Unit) -> str | None:
        """Why the pass leaves ``unit`` alone (None when it applies; "" when no loop has a divisibility test)."""
        if unit.body is None:
            return "the kernel does not parse"
        if sx.contains_type(unit.body, ("goto_statement", "labeled_statement")):
            return "the kernel has goto or labels"
        plans, reasons = _plans(unit)
        if plans:
            return None
        return reasons[0] if reasons else ""  # (no loop has such a test: nothing to say in the job's report)

    def applies(self, unit: Unit) -> bool:
        return self.why_not(unit) is None

    def apply(self, unit: Unit) -> Unit:
        """``unit`` with every matching loop stepping over its accepted iterations. Raises ``ValueError`` when the
        pass does not apply."""
        reason = self.why_not(unit)
        if reason is not None:
            raise ValueError(f"modstep does not apply: {reason}")
        edits: list[tuple[int, int, bytes]] = []
        helpers: dict[str, str] = {}
        for plan, suffix in _plans(unit)[0]:
            edits += plan
            helpers.update(HELPERS[suffix])
        return unit.with_text(sx.apply_edits(unit.data, edits), helpers=tuple(helpers.items()))


def _plans(unit: Unit) -> tuple[list[tuple[list[tuple[int, int, bytes]], str]], list[str]]:
    """The byte edits of each loop the pass rewrites (with its helpers' suffix), and the reasons it gave the loops
    with a ``%`` test it left."""
    constants = unit.notes.get(CONSTANTS_NOTE) or {}
    plans, reasons = [], []
    for loop in sx.walk(unit.body):
        if loop.type != "for_statement" or sx.in_lambda(loop, unit.body):
            continue
        got = _plan(unit, loop, constants)
        if isinstance(got, str):
            if got:
                reasons.append(f"line {loop.start_point[0] + 1}: {got}")
        else:
            plans.append(got)
    return plans, reasons


def _header(loop: Node) -> tuple[str, Node, Node] | None:
    """``(v, L, update)`` of ``for (int v = L; v < U; v++)`` (``<=``, ``++v``, ``v += 1``), else None."""
    init, cond, upd = (loop.child_by_field_name(f) for f in ("initializer", "condition", "update"))
    cond = sx.unparen(cond)
    if init is None or init.type != "declaration" or cond is None or upd is None:
        return None
    if sx.type_text(init.child_by_field_name("type")) not in sx.INT_TYPES - sx.UNSIGNED_TYPES:
        return None
    decls = init.children_by_field_name("declarator")
    if len(decls) != 1 or decls[0].type != "init_declarator":
        return None
    v = sx.text(decls[0].child_by_field_name("declarator"))
    if cond.type != "binary_expression" or sx.operator(cond) not in ("<", "<=") \
            or not sx.is_ident(sx.unparen(cond.child_by_field_name("left")), v):
        return None
    if sx.compact(upd) not in (f"{v}++", f"++{v}", f"{v}+=1"):
        return None
    return v, decls[0].child_by_field_name("value"), upd


def _pure(node: Node | None) -> bool:
    return node is None or not sx.contains_type(node, _EFFECTS)


def _remainder(node: Node, zero: bool) -> Node | None:
    """The ``E % s`` of a test that is true when ``s`` does not divide ``E`` (``zero = False``: ``E % s != 0``,
    ``0 != E % s``, ``E % s``) or when it does (``zero = True``: ``E % s == 0``, ``0 == E % s``, ``!(E % s)``)."""
    node = sx.unparen(node)
    if node is None:
        return None
    if node.type == "binary_expression" and sx.operator(node) == "%":
        return None if zero else node
    if zero and node.type == "unary_expression" and sx.operator(node) == "!":
        inner = sx.unparen(node.child_by_field_name("argument"))
        return inner if inner is not None and inner.type == "binary_expression" and sx.operator(inner) == "%" else None
    if node.type == "binary_expression" and sx.operator(node) == ("==" if zero else "!="):
        left, right = (sx.unparen(node.child_by_field_name(f)) for f in ("left", "right"))
        for a, b in ((left, right), (right, left)):
            if sx.is_number(b, 0) and a is not None and a.type == "binary_expression" and sx.operator(a) == "%":
                return a
    return None


def _skip_only(cons: Node | None) -> bool:
    """``continue;`` or ``{ continue; }``."""
    return cons is not None and (cons.type == "continue_statement" or (
        cons.type == "compound_statement" and [c.type for c in sx.statements(cons)] == ["continue_statement"]))


def _find(stmts: list[Node], v: str, offsets: dict[str, dict], decls: dict[str, Node]) -> tuple | str | None:
    """The test that filters ``v``'s iterations among a loop body's statements: ``(if statement, its divisibility
    term, that term's E % s, the other terms, skip, (a, b))`` with ``E = a * v + b`` (``skip``: the ``continue`` form,
    terms of ``||``; else a wrapping ``if``, terms of ``&&``), the reason a test is not one the pass reads, or None.

    Before it: declarations free of calls and assignments (their values read into ``offsets``, the nodes into
    ``decls``), ``if (...) continue;`` tests free of them, and, as the last statement of a level, a ``for`` loop of the
    counted form or an ``if`` without ``else`` free of them, whose bodies are searched in turn: an iteration the test
    rejects then does nothing."""
    for k, s in enumerate(stmts):
        last = k == len(stmts) - 1
        if s.type == "declaration" and _pure(s):
            for d in s.children_by_field_name("declarator"):
                if d.type == "init_declarator" and sx.is_ident(d.child_by_field_name("declarator")):
                    name = sx.text(d.child_by_field_name("declarator"))
                    p = cexpr.poly(d.child_by_field_name("value"), offsets, _atom(v, offsets))
                    if p is not None:
                        offsets[name], decls[name] = p, d
                    else:
                        offsets.pop(name, None)
                else:
                    offsets.pop(sx.text(sx.innermost_identifier(d)), None)
            continue
        if s.type == "if_statement" and s.child_by_field_name("alternative") is None:
            cons = s.child_by_field_name("consequence")
            cond = sx.clause_value(s.child_by_field_name("condition"))
            skip = _skip_only(cons)
            terms = sx.conjuncts(cond, "||" if skip else "&&")
            pure = all(_pure(t) for t in terms)
            for t in terms:
                rem = _remainder(t, zero=not skip)
                if rem is None or not (skip or last):
                    continue
                dividend = rem.child_by_field_name("left")
                if not any(n == v or v in cexpr.names(offsets.get(n, {})) for n in sx.identifiers(dividend)):
                    continue  # a test of another loop's counter
                e = cexpr.poly(dividend, offsets, _atom(v, offsets))
                parts = cexpr.split(e, v) if e is not None else None
                if parts is not None and not parts[0]:
                    continue  # (v - v: the test does not depend on the counter)
                if not pure:
                    return "its divisibility test has a call or an assignment beside it"
                if parts is None or set(parts[0]) != {()}:
                    return f"its divisibility test {sx.compact(rem)} is not of c * {v} plus terms free of {v} (c an integer)"
                return s, t, rem, [x for x in terms if x != t], skip, parts
            if not pure:
                return None
            if skip:
                continue
            if last:
                return _find(sx.statements(cons) if cons.type == "compound_statement" else [cons], v, offsets, decls)
            return None
        if last and s.type == "for_statement" and _header(s) is not None and _pure(s.child_by_field_name("condition")) \
                and _pure(_header(s)[1]) and s.child_by_field_name("body") is not None:
            inner = s.child_by_field_name("body")
            return _find(sx.statements(inner) if inner.type == "compound_statement" else [inner], v, offsets, decls)
        return None
    return None


def _plan(unit: Unit, loop: Node, constants: dict[str, int]) -> tuple[list[tuple[int, int, bytes]], str] | str:
    """The edits that make ``loop`` step over its accepted iterations and the suffix of the helpers they call, or why
    not ("" when it has no such test)."""
    head = _header(loop)
    body = loop.child_by_field_name("body")
    if head is None or body is None:
        return ""
    v, start, upd = head
    offsets: dict[str, dict] = {}
    decls: dict[str, Node] = {}
    got = _find(sx.statements(body) if body.type == "compound_statement" else [body], v, offsets, decls)
    if got is None or isinstance(got, str):
        return got or ""
    stmt, term, rem, rest, skip, (a_poly, b) = got
    a = a_poly[()]
    if not _pure(start):
        return f"the loop's start {sx.compact(start)} has a call or an assignment"
    if v in sx.maybe_written_names(body):
        return f"the loop writes its counter {v}"
    written = sx.maybe_written_names(loop) | sx.declared_names(body)
    divisor = sx.unparen(rem.child_by_field_name("right"))
    outer = {n for n in cexpr.names(b) for n in _atom_names(n)} | sx.identifiers(divisor)
    if outer & (written | {v}) or not _pure(divisor):
        return f"its divisibility test {sx.compact(rem)} reads a name the loop writes or declares"
    used, todo = [rem], [rem]
    while todo:  # the test and the declarations it reads, transitively
        for n in sx.identifiers(todo.pop()):
            if n in decls and decls[n].child_by_field_name("value") not in used:
                used.append(decls[n].child_by_field_name("value"))
                todo.append(decls[n].child_by_field_name("value"))
                used.append(decls[n].child_by_field_name("declarator"))
    if not all(_signed(n, unit.types) for n in used):
        return f"its divisibility test {sx.compact(rem)} reads an unsigned or unknown type (a wrapped difference)"
    literal = _positive_literal(divisor, constants)
    t = sx.type_text(loop.child_by_field_name("initializer").child_by_field_name("type"))
    suffix = "64" if t in sx.WIDE_INT_TYPES else ""
    neg_b = cexpr.show(cexpr.scale(b, -1)) if b else "0"
    if abs(a) == 1:  # accepted: v = -a*b (mod |s|)
        modulus, exact_residue = literal, True
        target = neg_b if a == 1 else (cexpr.show(b) if b else "0")
    elif literal is None:
        return f"its divisibility test {sx.compact(rem)} multiplies {v} by {a} and divides by a runtime {sx.text(divisor)}"
    else:  # a*v = -b (mod s): with g = gcd(a, s), solvable where g divides b, then v = (-b/g) * inv(a/g) (mod s/g)
        g = math.gcd(abs(a), literal)
        modulus = literal // g
        if modulus == 1:
            return ""  # the test does not depend on the counter: it keeps or skips the whole loop
        inv = pow((a // g) % modulus, -1, modulus)
        target = f"({neg_b}) / {g} * {inv}" if g > 1 else (f"({neg_b}) * {inv}" if inv != 1 else neg_b)
        exact_residue = g == 1  # else the visited iterations include the test's rejections where g does not divide b
    step = str(modulus) if modulus is not None else f"ptxf_mod_step{suffix}({sx.text(divisor)})"
    # the first accepted iteration at or after the start, then every step-th
    first = f"ptxf_mod_first{suffix}({sx.text(start)}, {target}, {step})"
    edits = [(start.start_byte, start.end_byte, first.encode()), (upd.start_byte, upd.end_byte, f"{v} += {step}".encode())]
    if literal is not None and exact_residue:
        edits.append(_drop_term(stmt, rest, skip))
    return edits, suffix


def _atom(v: str, offsets: dict):
    """What a subexpression that is no polynomial reads as: itself, parenthesised, where it is free of ``v``, of the
    body's substituted locals and of effects; else unknown."""
    def atom(node: Node):
        if not _pure(node) or sx.identifiers(node) & ({v} | set(offsets)) \
                or sx.contains_type(node, ("subscript_expression", "pointer_expression")):
            return None
        return {(f"({sx.text(node)})",): 1}
    return atom


def _atom_names(name: str) -> set[str]:
    """The identifiers in a polynomial's name (a plain name, or an atom's parenthesised text)."""
    return set(re.findall(r"[A-Za-z_]\w*", name))


def _positive_literal(node: Node, constants: dict[str, int]) -> int | None:
    """The value of a positive integer literal (``2``, specialise's ``((int)2)``, a ``#define`` of one), else None."""
    inner = cexpr.uncast(node)
    if node.type == "cast_expression" and sx.type_text(node.child_by_field_name("type")) in _SIGNED and inner is not None:
        node = inner
    if node.type == "number_literal":
        v = cexpr.literal_value(node)
        return v if isinstance(v, int) and v > 0 else None
    if node.type == "identifier" and isinstance(constants.get(sx.text(node)), int) and constants[sx.text(node)] > 0:
        return constants[sx.text(node)]
    return None


def _signed(node: Node, types: sx.Types) -> bool:
    """Every name in ``node`` a signed integer scalar, no builtin index (unsigned), no unsigned literal or cast: its
    arithmetic does not wrap a negative difference into a large positive one."""
    for n in sx.walk(node):
        if n.type == "identifier" and (n.parent is None or n.parent.type != "field_expression"):
            t = types.scalar.get(sx.text(n))
            if t is None or " ".join(w for w in t.split() if w not in ("const", "volatile")) not in _SIGNED:
                return False
        elif n.type == "field_expression":
            return False
        elif n.type == "number_literal" and "u" in sx.text(n).lower():
            return False
        elif n.type == "cast_expression" and sx.type_text(n.child_by_field_name("type")) not in _SIGNED:
            return False
    return True


def _drop_term(stmt: Node, rest: list[Node], skip: bool) -> tuple[int, int, bytes]:
    """The edit that removes the divisibility term from the test (or the test itself when it was the only term)."""
    cons = stmt.child_by_field_name("consequence")
    clause = stmt.child_by_field_name("condition")
    if rest:
        joined = (" || " if skip else " && ").join(f"({sx.text(t)})" for t in rest)
        return clause.start_byte, clause.end_byte, f"({joined})".encode()
    if skip:
        return stmt.start_byte, stmt.end_byte, b"/* (transform modstep: every visited iteration passes the test) */"
    return stmt.start_byte, cons.start_byte, b""
