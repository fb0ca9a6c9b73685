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

    for (int kh = ptxf_mod_first(0, (long long)oh + (long long)pad, ptxf_mod_step(stride)); kh < K;
         kh = ptxf_mod_next(kh, ptxf_mod_step(stride), K)) {
        int th = oh + pad - kh;
        if (th < 0 || th % stride != 0) continue;       // kept: stride is not a positive literal
        ...

(``ptxf_mod_step(s)``: ``|s|``, 1 for 0 and for INT_MIN; ``ptxf_mod_first(lo, t, m)``: the first ``v >= lo`` with ``v = t
(mod m)``, in 64 bits, INT_MAX where that is past int; ``ptxf_mod_next(v, m, U)``: ``v + m``, or ``U`` where that
reaches it, so the step never overflows near INT_MAX.) The canonical perfect nest (perfect_nest.py sinks ``kh``'s
test into the ``kw`` loop's body) is read too: a test of an outer loop's counter found in the body of the inner loop
its body ends with; two loops' terms in one test are dropped in one edit.

Exact: the test accepts ``v`` when ``s`` divides ``a * v + b``; for ``a = +-1`` that is ``v = -a * b (mod |s|)``; the
new loop starts at the first such ``v`` at or after the old start and steps by ``|s|``, so it visits every accepted
iteration, in the same order; for another integer ``a`` (a dilation, after ``specialise`` made it a literal) and a
literal ``s``, with ``g = gcd(a, s)``: ``v = (-b / g) * inv(a / g) (mod s / g)`` where ``g`` divides ``b`` (none
accepted where it does not: the test, kept when ``g > 1``, rejects those visited). The statements of a rejected
iteration before the test are declarations and tests free of calls and assignments (nothing is lost by skipping
them). The test itself is dropped where ``s`` is a positive integer literal (or a ``#define`` of one, or
specialise's ``((int)2)``); otherwise it stays (a ``% s`` per accepted iteration, none per rejected one;
``specialise`` then versions ``s`` on its bench value). The target ``-a * b`` is computed in 64 bits (the original's
``E`` fits an int; ``-b`` and ``b * inv`` may not). Inputs where the original's own ``E`` overflows are undefined in
C++ and CUDA alike, and not kept.

Applies to ``for (int v = L; v < U; v++)`` (``<=`` with a literal ``U``, ``++v``, ``v += 1``; ``v`` a 32-bit
``int`` initialised with ``=`` by an integer literal ``L >= 0``, never written or declared again in the body; the
loop's test free of calls and assignments) whose body opens with declarations and ``if (...) continue;`` tests free
of calls and assignments, then either

- ``if (A || E % s != 0 || B) continue;`` (``E % s``, ``0 != E % s`` too), or
- ``if (A && E % s == 0 && B) ...`` (``!(E % s)``, ``0 == E % s`` too) with no ``else``, the last statement of its block,

or, as the block's last statement, a counted ``for`` loop or an ``if`` without ``else`` (both free of calls and
assignments in their tests) whose body opens so in turn (a rejected iteration then does nothing). ``E``, read through
those declarations, is ``c * v + b`` (``c = +-1``, or any integer with a literal ``s``); it and the declarations it
reads are int arithmetic (names of 32-bit ``int`` type, decimal literals, ``+ - * / %``: no cast, ``sizeof``,
builtin index or unsigned literal, whose unsigned or wider arithmetic is not the polynomial solved); ``s`` is an
``int`` name or a literal of at most 2^30. Every name ``E`` and ``s`` read is declared once in the loop (a
declaration inside it would hide the one read), never written in the loop, and never aliased anywhere in the kernel
(its address taken, a reference bound to it, passed to a call that is not a value function; a lambda capturing by
reference anywhere leaves the kernel alone). Subexpressions free of ``v``, of calls and of memory reads are read as a
whole (``(idx / OW) % OH``). The disjuncts and conjuncts are free of calls and assignments (dropping one changes no
side effect). Loops in a lambda, and kernels with ``goto`` or labels, are left as written.
"""
from __future__ import annotations

import math
import re

from ptxfactory.harness import cexpr

from . import syntax as sx
from .base import Unit
from .expand import CONSTANTS_NOTE
from .syntax import Node

HELPERS = {
    "ptxf_mod_step": """\
static __device__ __forceinline__ int ptxf_mod_step(int s)
{   // |s|; 1 for s = 0 (its test is undefined) and for INT_MIN (no |s|): a step that never stalls the loop
    return s > 0 ? s : (s < 0 && s != -2147483647 - 1) ? -s : 1;
}""",
    "ptxf_mod_first": """\
static __device__ __forceinline__ int ptxf_mod_first(int lo, long long target, int m)
{   // the first v >= lo (lo >= 0) with v = target (mod m), m > 0, in 64 bits; INT_MAX where none is an int
    long long r = (target - (long long)lo) % m;
    const long long v = (long long)lo + (r < 0 ? r + m : r);
    return v > 2147483647LL ? 2147483647 : (int)v;
}""",
    "ptxf_mod_next": """\
static __device__ __forceinline__ int ptxf_mod_next(int v, int m, int hi)
{   // v + m, or hi where that reaches it (0 <= v < hi): the loop's test v < hi ends it, no signed overflow
    return hi - v > m ? v + m : hi;
}""",
}
_INT32 = frozenset({"int", "signed", "signed int", "int32_t"})  # the one width the rewrite computes in
_LITERAL_MAX = 1 << 30  # literal strides, coefficients and bounds the rewrite takes (no sum of two overflows)
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

    def maybe(self, unit: Unit) -> bool:
        """Whether a chain could bring the pass to apply (plan_chains): a ``%`` in some ``for`` loop's body."""
        return unit.body is not None and any(
            n.type == "binary_expression" and sx.operator(n) == "%" and any(
                p.type == "for_statement" for p in _ancestors(n, unit.body)) for n in sx.walk(unit.body))

    def apply(self, unit: Unit) -> Unit:
        """``unit`` with every matching loop stepping over its accepted iterations. Raises ``ValueError`` when the
        pass does not apply."""
        reason = self.why_not(unit)
        if reason is not None:
            raise ValueError(f"modstep does not apply: {reason}")
        edits: list[tuple[int, int, bytes]] = []
        drops: dict[tuple[int, int], tuple[Node, bool, list[Node]]] = {}
        for header, drop in _plans(unit)[0]:
            edits += header
            if drop is not None:  # (one test may hold two loops' terms: kh's and kw's in one condition)
                stmt, term, skip = drop
                drops.setdefault((stmt.start_byte, stmt.end_byte), (stmt, skip, []))[2].append(term)
        for stmt, skip, terms in drops.values():
            edits.append(_drop_terms(stmt, terms, skip))
        return unit.with_text(sx.apply_edits(unit.data, edits), helpers=tuple(HELPERS.items()))


def _plans(unit: Unit) -> tuple[list[tuple[list[tuple[int, int, bytes]], tuple | None]], list[str]]:
    """Each loop the pass rewrites: its header's byte edits and the test term it drops (``(if statement, term,
    skip)`` or None); and the reasons it gave the loops with a ``%`` test it left."""
    constants = unit.notes.get(CONSTANTS_NOTE) or {}
    plans, reasons = [], []
    if any(_captures_by_reference(n) for n in sx.walk(unit.body) if n.type == "lambda_expression"):
        return [], ["a lambda captures by reference (what it writes is not read here)"] if "%" in unit.text else []
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


def _ancestors(n: Node, stop: Node):
    p = n.parent
    while p is not None and p != stop:
        yield p
        p = p.parent


def _captures_by_reference(lam: Node) -> bool:
    caps = next((c for c in lam.children if c.type == "lambda_capture_specifier"), None)
    return caps is not None and "&" in sx.text(caps)


def _header(loop: Node) -> tuple[str, Node, Node, Node] | None:
    """``(v, L, U, update)`` of ``for (int v = L; v < U; v++)`` (``<=``, ``++v``, ``v += 1``; ``v`` a 32-bit int
    initialised with ``=``), else None."""
    init, cond, upd = (loop.child_by_field_name(f) for f in ("initializer", "condition", "update"))
    cond = sx.unparen(cond)
    if init is None or init.type != "declaration" or cond is None or upd is None:
        return None
    if _base(sx.type_text(init.child_by_field_name("type"))) not in _INT32:
        return None
    decls = init.children_by_field_name("declarator")
    if len(decls) != 1 or decls[0].type != "init_declarator" or not sx.is_ident(decls[0].child_by_field_name("declarator")):
        return None
    value = decls[0].child_by_field_name("value")
    if value is None or value.type in ("argument_list", "initializer_list"):  # int v(1), int v{1}
        return None
    v = sx.text(decls[0].child_by_field_name("declarator"))
    if cond.type != "binary_expression" or sx.operator(cond) not in ("<", "<=") \
            or not sx.is_ident(sx.unparen(cond.child_by_field_name("left")), v):
        return None
    if sx.compact(upd) not in (f"{v}++", f"++{v}", f"{v}+=1"):
        return None
    return v, value, cond.child_by_field_name("right"), upd


def _base(ctype: str) -> str:
    return " ".join(w for w in ctype.split() if w not in ("const", "volatile"))


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


def _plan(unit: Unit, loop: Node, constants: dict[str, int]) -> tuple[list[tuple[int, int, bytes]], tuple | None] | str:
    """The header edits that make ``loop`` step over its accepted iterations and the test term it drops, or why not
    ("" when it has no such test)."""
    head = _header(loop)
    body = loop.child_by_field_name("body")
    if head is None or body is None:
        return ""
    v, start, bound, upd = head
    offsets: dict[str, dict] = {}
    decls: dict[str, Node] = {}
    got = _find(sx.statements(body) if body.type == "compound_statement" else [body], v, offsets, decls)
    if got is None or isinstance(got, str):
        return got or ""
    stmt, term, rem, rest, skip, (a_poly, b) = got
    a = a_poly[()]
    lo = _literal(start, constants)
    if lo is None or lo < 0:
        return f"the loop's start {sx.compact(start)} is no literal at least 0"
    cond = sx.unparen(loop.child_by_field_name("condition"))
    if not _pure(cond):
        return f"the loop's test {sx.compact(cond)} has a call or an assignment"
    if sx.operator(cond) == "<=":
        hi = _literal(bound, constants)
        if hi is None:
            return f"the loop's bound {sx.compact(bound)} (<=) is no literal"
        hi_text = str(hi + 1)
    else:
        hi_text = sx.text(bound)
    if v in sx.maybe_written_names(body) or v in sx.declared_names(body):
        return f"the loop writes or declares again its counter {v}"
    divisor = sx.unparen(rem.child_by_field_name("right"))
    literal = _literal(divisor, constants)
    if literal is None and not (sx.is_ident(divisor) and _base(unit.types.scalar.get(sx.text(divisor)) or "") in _INT32):
        return f"its divisibility test {sx.compact(rem)} divides by {sx.compact(divisor)}, no int name or literal"
    if literal is not None and literal <= 0:
        return f"its divisibility test {sx.compact(rem)} divides by {literal}"
    used, todo = [rem.child_by_field_name("left")], [rem.child_by_field_name("left")]
    names = set()
    while todo:  # the test and the declarations it reads, transitively
        for n in sx.identifiers(todo.pop()):
            names.add(n)
            if n in decls and decls[n].child_by_field_name("value") not in used:
                used.append(decls[n].child_by_field_name("value"))
                todo.append(decls[n].child_by_field_name("value"))
    names = (names - {v}) | sx.identifiers(divisor)
    if not all(_int_terms(n, unit.types) for n in used) or any(
            _base(unit.types.scalar.get(n) or "") not in _INT32 for n in names):
        return f"its divisibility test {sx.compact(rem)} reads other than 32-bit int names and literals"
    why = _opaque(loop)
    if why:
        return why
    inner = sx.declaration_counts(loop)  # (a name declared again in the loop would hide the one the test reads)
    if any(inner.get(n, 0) != (1 if n in decls else 0) or (n not in decls and _visible_type(n, loop, unit.fn) not in _INT32)
           for n in names) or \
            names & (sx.maybe_written_names(loop) | _aliased(unit.body)):
        return f"its divisibility test {sx.compact(rem)} reads a name declared twice, written in the loop or aliased"
    if abs(a) == 1:  # accepted: v = -a*b (mod |s|)
        modulus, exact_residue = literal, True
        target = _wide(b if a == -1 else cexpr.scale(b, -1))
    elif literal is None:
        return f"its divisibility test {sx.compact(rem)} multiplies {v} by {a} and divides by a runtime {sx.text(divisor)}"
    else:  # a*v = -b (mod s): with g = gcd(a, s), solvable where g divides b, then v = (-b/g) * inv(a/g) (mod s/g)
        g = math.gcd(abs(a), literal)
        modulus = literal // g
        if modulus == 1:
            return ""  # the test does not depend on the counter: it keeps or skips the whole loop
        inv = pow((a // g) % modulus, -1, modulus)
        neg_b = _wide(cexpr.scale(b, -1))
        target = f"({neg_b}) / {g} % {modulus} * {inv}" if g > 1 else f"({neg_b}) % {modulus} * {inv}"
        exact_residue = g == 1  # else the visited iterations include the test's rejections where g does not divide b
    step = str(modulus) if modulus is not None else f"ptxf_mod_step({sx.text(divisor)})"
    # the first accepted iteration at or after the start, then every step-th, clamped at the bound
    first = f"ptxf_mod_first({lo}, {target}, {step})"
    edits = [(start.start_byte, start.end_byte, first.encode()),
             (upd.start_byte, upd.end_byte, f"{v} = ptxf_mod_next({v}, {step}, {hi_text})".encode())]
    return edits, ((stmt, term, skip) if literal is not None and exact_residue else None)


def _aliased(body: Node) -> set[str]:
    """Names whose address is taken, that a reference is bound to, or that a call other than a value function takes as
    an argument of its own, anywhere in ``body``: a write through the alias is not the name's own (``int& r = c; ...
    r += 1;``)."""
    out = set()
    for n in sx.walk(body):
        if n.type == "pointer_expression" and sx.operator(n) == "&":
            out |= sx.identifiers(n)
        elif n.type == "init_declarator" and n.child_by_field_name("declarator").type == "reference_declarator":
            out |= sx.identifiers(n)  # the referent and the reference itself (int& lim = rows; rows-- moves lim)
        elif n.type == "call_expression" and sx.call_name(n) not in sx.VALUE_FUNCS:
            # (a reference parameter binds an lvalue: a name passed as it is; __ldg(x + i * W) writes neither i nor W)
            out |= {sx.text(a) for a in map(sx.unparen, sx.call_args(n)) if sx.is_ident(a)}
    return out


def _visible_type(name: str, at: Node, fn: Node) -> str | None:
    """The type (``const`` and ``volatile`` dropped) of the declaration of ``name`` that is in scope at ``at``: the
    nearest enclosing block's statement before ``at``, a loop header around it, or a parameter of ``fn``; None where
    none is (a global, which the kernel's text does not hold, or a name declared in another block only)."""
    child, p = at, at.parent
    while p is not None:
        decls = []
        if p.type == "compound_statement":
            decls = [s for s in sx.statements(p) if s.start_byte < child.start_byte and s.type == "declaration"]
        elif p.type == "for_statement" and p.child_by_field_name("initializer") is not None and child != p.child_by_field_name("initializer"):
            decls = [p.child_by_field_name("initializer")]
        elif p.type == "function_definition":
            params = sx.function_declarator(p).child_by_field_name("parameters")
            decls = [c for c in params.named_children if c.type == "parameter_declaration"]
        for d in reversed(decls):
            if d.type not in ("declaration", "parameter_declaration"):
                continue
            for decl in d.children_by_field_name("declarator"):
                ident = sx.innermost_identifier(decl)
                if ident is not None and sx.text(ident) == name:
                    if decl.type in ("reference_declarator", "pointer_declarator", "array_declarator") or (
                            decl.type == "init_declarator" and decl.child_by_field_name("declarator").type != "identifier"):
                        return None
                    return _base(sx.type_text(d.child_by_field_name("type")))
        if p == fn:
            return None
        child, p = p, p.parent
    return None


def _opaque(region: Node) -> str | None:
    """Why names read in ``region`` cannot be followed by their declarations and writes (an asm output operand, a
    range-for's or a lambda's own declarations: neither is a declaration node the counts read), or None."""
    for n in sx.walk(region):
        if n.type in ("gnu_asm_expression", "asm_statement"):
            return "it holds inline asm (its outputs are writes the pass does not read)"
        if n.type == "for_range_loop":
            return "it holds a range-for (its variable is a declaration the pass does not read)"
        if n.type == "lambda_expression":
            return "it holds a lambda (its captures are declarations the pass does not read)"
    return None


def _wide(p: dict) -> str:
    """The polynomial ``p`` over int names as a 64-bit expression (each name widened before any product or sum: the
    original's ``E`` does not overflow, its parts negated or scaled might)."""
    if not p:
        return "0LL"
    wide = {tuple(f"(long long){n}" for n in m): c for m, c in p.items()}
    text = cexpr.show(wide)
    return text if any(m for m in p) else f"{text}LL"


def _atom(v: str, offsets: dict):
    """What a subexpression that is no polynomial reads as: itself, parenthesised, where it is free of ``v``, of the
    body's substituted locals, of effects and of memory reads; else unknown."""
    def atom(node: Node):
        if not _pure(node) or sx.identifiers(node) & ({v} | set(offsets)) \
                or sx.contains_type(node, ("subscript_expression", "pointer_expression")):
            return None
        return {(f"({sx.text(node)})",): 1}
    return atom


def _literal(node: Node | None, constants: dict[str, int]) -> int | None:
    """The value of an int literal of at most :data:`_LITERAL_MAX` in magnitude (``2``, ``-1``, specialise's
    ``((int)2)``, a ``#define`` of one), else None."""
    node = sx.unparen(node)
    if node is not None and node.type == "cast_expression" and _base(sx.type_text(node.child_by_field_name("type"))) in _INT32:
        node = sx.unparen(node.child_by_field_name("value"))
    if node is None:
        return None
    if node.type == "identifier":
        v = constants.get(sx.text(node))
    elif node.type == "number_literal" and re.fullmatch(r"-?[0-9]+", sx.text(node)):
        v = int(sx.text(node))
    else:
        return None
    return v if isinstance(v, int) and abs(v) <= _LITERAL_MAX else None


def _int_terms(node: Node | None, types: sx.Types) -> bool:
    """``node`` is int arithmetic: names of 32-bit int type, decimal literals below 2^31 without suffix (specialise's
    ``((int)3)`` too), ``+ - * / %``, parentheses, a sign; no other cast, ``sizeof``, builtin index or call (an unsigned
    or wider operand would make the test read another number than the polynomial the pass solves)."""
    if node is None:
        return False
    t = node.type
    if t == "parenthesized_expression":
        return node.named_child_count == 1 and _int_terms(node.named_children[0], types)
    if t == "identifier":
        return _base(types.scalar.get(sx.text(node)) or "") in _INT32
    if t == "number_literal":
        return bool(re.fullmatch(r"-?(0|[1-9][0-9]*)", sx.text(node))) and abs(int(sx.text(node))) < 2 ** 31  # (no octal)
    if t == "cast_expression":
        inner = sx.unparen(node.child_by_field_name("value"))
        return _base(sx.type_text(node.child_by_field_name("type"))) in _INT32 and inner is not None \
            and inner.type == "number_literal" and _int_terms(inner, types)
    if t == "unary_expression":
        return sx.operator(node) in ("-", "+") and _int_terms(node.child_by_field_name("argument"), types)
    if t == "binary_expression":
        return sx.operator(node) in ("+", "-", "*", "/", "%") and all(
            _int_terms(node.child_by_field_name(f), types) for f in ("left", "right"))
    return False


def _drop_terms(stmt: Node, terms: list[Node], skip: bool) -> tuple[int, int, bytes]:
    """The edit that removes the divisibility terms ``terms`` from the test ``stmt`` (the test itself when no other
    term is left: ``;`` for a ``continue``, the guarded statement alone for a wrapping ``if``)."""
    cons = stmt.child_by_field_name("consequence")
    clause = stmt.child_by_field_name("condition")
    kept = [t for t in sx.conjuncts(sx.clause_value(clause), "||" if skip else "&&") if t not in terms]
    if kept:
        joined = (" || " if skip else " && ").join(f"({sx.text(t)})" for t in kept)
        return clause.start_byte, clause.end_byte, f"({joined})".encode()
    if skip:
        return stmt.start_byte, stmt.end_byte, b"; /* (transform modstep: every visited iteration passes the test) */"
    return stmt.start_byte, cons.start_byte, b""
