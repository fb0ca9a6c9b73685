"""``online_softmax``: a max loop followed by an exp-sum loop over the same elements becomes one online loop.

Pattern (a softmax's, a cross-entropy's or a logsumexp's first two passes, in one block of statements)::

    T m = E(a - 1);                  // or any constant (-INFINITY, -FLT_MAX, -1e30f), the first loop then from a
    for (I j = a; j < n; j++)        // the max: m = fmaxf(m, E(j)) / fmax / max (either order),
        m = fmaxf(m, E(j));          //          or if (E(j) > m) m = E(j);  (a local v = E(j) first is fine)
    T s = 0;                         // declared here or before the first loop
    for (I k = a'; k < n; k++)       // a' = a - 1 after an E(a - 1) start, else a' = a
        s += EXP(E(k) - m);          // EXP: expf, __expf, exp (a local v = E(k) first is fine)

becomes (the max and the sum in one pass over the elements, E read once)::

    T m = -inf;                      // (unchanged after a constant start)
    T s = 0;
    for (I k = a'; k < n; k++) {
        T ptxf_v = E(k);
        if (ptxf_v > m) { s = s * EXP(m - ptxf_v) + 1; m = ptxf_v; }
        else            { s += EXP(ptxf_v - m); }
    }

the branch form of an online softmax that :mod:`.reductions` recognises, so ``rowpar`` then splits the loop over
lanes and merges the lanes' (max, sum) parts, and ``vector_loops`` widens it. ``m`` ends as it did (the same
maximum); ``s`` is the same sum of exponentials, each rescaled as the maximum grows: not bit-identical (rounding),
so the pass is refused when the spec asks for exact results. NaN and infinities behave as in the original: a NaN
element fails the comparison and adds ``EXP(NaN)``; an all ``-inf`` row gives ``EXP(-inf - -inf)``, NaN, in both.

Refused (left alone) when: the two loops are not in one block with only the sum's declaration between them; the
bounds differ (textually, after renaming the second loop's variable); ``E`` differs between the loops, writes
anything, calls anything but a pure math function or a load intrinsic, or reads ``m``, ``s`` or a buffer the
kernel writes; ``m`` or ``s`` is written or read elsewhere between its declaration and the second loop's end;
the sum does not start at 0; ``m`` and ``s`` are not both ``float`` or both ``double``.
"""
from __future__ import annotations

import re

from . import syntax as sx
from .base import Unit
from .rowpar import PlannedPass, Refused
from .syntax import Node

EXP_FUNCS = ("expf", "__expf", "exp")
MAX_FUNCS = ("fmaxf", "fmax", "max")
# calls E may make: loads and pure math (anything else might have an effect or read state)
PURE_CALLS = frozenset({"__ldg", "__ldcs", "__ldcg", "__ldca", "__ldlu", "__ldcv", "__bfloat162float", "__half2float",
                        "fabsf", "fabs", "sqrtf", "sqrt", "fminf", "fmaxf", "fmin", "fmax", "min", "max", "__int2float_rn",
                        "__float2int_rn", "logf", "log", "__logf", "tanhf", "expf", "__expf", "exp"})
NEG_INF = {"float": "__int_as_float(0xff800000)", "double": "__longlong_as_double(0xfff0000000000000ULL)"}
ONE = {"float": "1.0f", "double": "1.0"}


def _norm(s: str) -> str:
    return re.sub(r"\s+", "", s)


def _body_stmt(loop: Node) -> list[Node]:
    body = loop.child_by_field_name("body")
    if body is None:
        return []
    return sx.statements(body) if body.type == "compound_statement" else [body]


def _for_header(loop: Node) -> tuple[str, str, str, Node] | None:
    """``(var, start, bound, type)``: the texts and the declaration's type node of ``for (I var = start; var < bound;
    var++)`` (``var <= last``, a causal row's bound, is read as ``var < (last) + 1``), else None."""
    init, cond, upd = (loop.child_by_field_name(f) for f in ("initializer", "condition", "update"))
    if init is None or init.type != "declaration" or cond is None or upd is None:
        return None
    decls = [c for c in init.children if c.type == "init_declarator"]
    if len(decls) != 1:
        return None
    var = sx.text(decls[0].child_by_field_name("declarator"))
    start = decls[0].child_by_field_name("value")
    cond = sx.unparen(cond)
    if cond.type != "binary_expression" or sx.operator(cond) not in ("<", "<=") or not sx.is_ident(cond.child_by_field_name("left"), var):
        return None
    ok_upd = (upd.type == "update_expression" and sx.operator(upd) == "++" and sx.is_ident(upd.child_by_field_name("argument"), var)) or \
             (upd.type == "assignment_expression" and sx.operator(upd) == "+=" and sx.is_ident(upd.child_by_field_name("left"), var)
              and sx.is_number(upd.child_by_field_name("right"), 1))
    if not ok_upd or start is None:
        return None
    bound = sx.text(cond.child_by_field_name("right"))
    if sx.operator(cond) == "<=":
        bound = f"({bound}) + 1"
    return var, sx.text(start), bound, init.child_by_field_name("type")


def _renamed(node: Node, var: str, to: str) -> str:
    """``node``'s text with every identifier ``var`` replaced by ``to`` (parenthesised unless a name or a number)."""
    data = node.text
    to = to if re.fullmatch(r"\w+", to) else f"({to})"
    edits = [(n.start_byte - node.start_byte, n.end_byte - node.start_byte, to.encode())
             for n in sx.walk(node) if n.type == "identifier" and sx.text(n) == var]
    for s, e, b in sorted(edits, reverse=True):
        data = data[:s] + b + data[e:]
    return data.decode()


def _max_update(stmts: list[Node], m: str) -> Node:
    """The element expression E of the max loop's body (through its local, if it has one). Raises Refused."""
    local, value = None, None
    if len(stmts) == 2 and stmts[0].type == "declaration":
        decls = [c for c in stmts[0].children if c.type == "init_declarator"]
        if len(decls) != 1 or decls[0].child_by_field_name("value") is None:
            raise Refused("the max loop's body is not one update (or a local, then the update)")
        local = sx.text(decls[0].child_by_field_name("declarator"))
        value = decls[0].child_by_field_name("value")
        stmts = stmts[1:]
    if len(stmts) != 1:
        raise Refused("the max loop's body is not one update (or a local, then the update)")
    st = stmts[0]
    elem = None
    if st.type == "expression_statement":
        a = sx.unparen(st.children[0])
        if a.type == "assignment_expression" and sx.operator(a) == "=" and sx.is_ident(a.child_by_field_name("left"), m):
            call = sx.unparen(a.child_by_field_name("right"))
            if sx.call_name(call) in MAX_FUNCS and len(sx.call_args(call)) == 2:
                x, y = sx.call_args(call)
                elem = y if sx.is_ident(sx.unparen(x), m) else x if sx.is_ident(sx.unparen(y), m) else None
    elif st.type == "if_statement" and st.child_by_field_name("alternative") is None:
        cond = sx.unparen(st.child_by_field_name("condition"))
        cons = st.child_by_field_name("consequence")
        inner = sx.statements(cons) if cons.type == "compound_statement" else [cons]
        if cond is not None and cond.type == "parenthesized_expression":
            cond = sx.unparen(cond)
        if cond is not None and cond.type == "condition_clause":
            cond = sx.unparen(cond.child_by_field_name("value"))
        if cond is not None and cond.type == "binary_expression" and len(inner) == 1 and inner[0].type == "expression_statement":
            op, left, right = sx.operator(cond), sx.unparen(cond.child_by_field_name("left")), sx.unparen(cond.child_by_field_name("right"))
            cand = left if op == ">" and sx.is_ident(right, m) else right if op == "<" and sx.is_ident(left, m) else None
            a = sx.unparen(inner[0].children[0])
            if cand is not None and a.type == "assignment_expression" and sx.operator(a) == "=" \
                    and sx.is_ident(a.child_by_field_name("left"), m) and _norm(sx.text(a.child_by_field_name("right"))) == _norm(sx.text(cand)):
                elem = cand
    if elem is None:
        raise Refused(f"the first loop is not a max of {m} (m = fmaxf(m, e), or if (e > m) m = e)")
    if local is not None:
        if not sx.is_ident(sx.unparen(elem), local):
            raise Refused("the max loop's local is not the element compared")
        return value
    return elem


def _pure(expr: Node, forbidden: set[str], written_buffers: set[str]) -> None:
    """Raises Refused unless ``expr`` writes nothing, calls only :data:`PURE_CALLS` and reads none of ``forbidden``
    or of the buffers the kernel writes."""
    for n in sx.walk(expr):
        if n.type in ("assignment_expression", "update_expression", "comma_expression"):
            raise Refused("the element expression writes a variable")
        if n.type == "call_expression" and sx.call_name(n) not in PURE_CALLS:
            raise Refused(f"the element expression calls {sx.call_name(n) or 'a function'}")
        if n.type == "identifier" and sx.text(n) in forbidden | written_buffers:
            raise Refused(f"the element expression reads {sx.text(n)}, which the loops or the kernel write")


def first_fusion(unit: Unit, starts, fuse, none: str, inexact: str) -> list[tuple[int, int, bytes]]:
    """The edits of ``fuse(unit, stmts, i)`` at the first statement ``stmts[i]`` of any block for which ``starts`` holds
    and ``fuse`` does not refuse; raises :class:`Refused` with the first reason (``none`` when no statement starts one),
    or ``inexact`` when the spec asks for exact results (checked after the pattern: a kernel without the loops is
    refused for that, not for exactness)."""
    if unit.body is None:
        raise Refused("no kernel body")
    reasons = []
    for block in (n for n in sx.walk(unit.body) if n.type == "compound_statement"):
        stmts = sx.statements(block)
        for i, st in enumerate(stmts):
            if not starts(st):
                continue
            try:
                edits = fuse(unit, stmts, i)
            except Refused as e:
                reasons.append(str(e))
                continue
            if unit.spec.check.rtol == 0 and unit.spec.check.atol == 0:
                raise Refused(inexact)
            return edits
    raise Refused(reasons[0] if reasons else none)


class OnlineSoftmaxPass(PlannedPass):
    """A max loop then an exp-sum loop over the same elements -> one loop (online softmax). See the module docstring."""

    name = "online_softmax"
    group = None
    exact = False

    def apply(self, unit: Unit) -> Unit:
        return unit.with_text(sx.apply_edits(unit.data, self._plan(unit)))

    def _plan(self, unit: Unit) -> list[tuple[int, int, bytes]]:
        return first_fusion(unit, lambda st: st.type == "for_statement", self._fuse,
                            "no max loop followed by an exp-sum loop",
                            "the spec asks for exact results, and an online sum of exponentials rounds differently")

    def _fuse(self, unit: Unit, stmts: list[Node], i: int) -> list[tuple[int, int, bytes]]:
        loop1 = stmts[i]
        h1 = _for_header(loop1)
        if h1 is None:
            raise Refused("no max loop followed by an exp-sum loop")
        j, a1, n1, _ = h1
        # the max variable: the one the body assigns
        assigned = sx.written_names(loop1.child_by_field_name("body")) - {j}
        if len(assigned) != 1:
            raise Refused("no max loop followed by an exp-sum loop")
        m = assigned.pop()
        elem = _max_update(_body_stmt(loop1), m)
        # the second loop: after at most the sum's declaration
        k_idx = i + 1
        sum_decl = None
        if k_idx < len(stmts) and stmts[k_idx].type == "declaration":
            sum_decl = stmts[k_idx]
            k_idx += 1
        if k_idx >= len(stmts) or stmts[k_idx].type != "for_statement":
            raise Refused(f"no exp-sum loop right after the max of {m}")
        loop2 = stmts[k_idx]
        h2 = _for_header(loop2)
        if h2 is None:
            raise Refused("the exp-sum loop's header is not for (I k = a; k < n; k++)")
        k, a2, n2, type2 = h2
        if _norm(n1) != _norm(n2):
            raise Refused("the max loop and the exp-sum loop have different bounds")
        body2 = _body_stmt(loop2)
        local2 = None  # float v = E(k); s += EXP(v - m);: the element through a local, as the max loop may have it
        if len(body2) == 2 and body2[0].type == "declaration":
            decls = [c for c in body2[0].children if c.type == "init_declarator"]
            if len(decls) == 1 and decls[0].child_by_field_name("value") is not None:
                local2 = (sx.text(decls[0].child_by_field_name("declarator")), decls[0].child_by_field_name("value"))
                body2 = body2[1:]
        if len(body2) != 1 or body2[0].type != "expression_statement":
            raise Refused("the exp-sum loop's body is not one s += EXP(e - m)")
        a = sx.unparen(body2[0].children[0])
        s, term = None, None
        if a.type == "assignment_expression" and sx.operator(a) == "+=" and sx.is_ident(a.child_by_field_name("left")):
            s, term = sx.text(a.child_by_field_name("left")), sx.unparen(a.child_by_field_name("right"))
        elif a.type == "assignment_expression" and sx.operator(a) == "=" and sx.is_ident(a.child_by_field_name("left")):
            r = sx.unparen(a.child_by_field_name("right"))
            s = sx.text(a.child_by_field_name("left"))
            if r.type == "binary_expression" and sx.operator(r) == "+" and sx.is_ident(sx.unparen(r.child_by_field_name("left")), s):
                term = sx.unparen(r.child_by_field_name("right"))
        exp = sx.call_name(term) if term is not None and term.type == "call_expression" else None
        if exp not in EXP_FUNCS or len(sx.call_args(term)) != 1:
            raise Refused("the exp-sum loop's body is not one s += EXP(e - m)")
        diff = sx.unparen(sx.call_args(term)[0])
        if diff.type != "binary_expression" or sx.operator(diff) != "-" or not sx.is_ident(sx.unparen(diff.child_by_field_name("right")), m):
            raise Refused(f"the exponent is not (element - {m})")
        elem2 = diff.child_by_field_name("left")
        if local2 is not None:
            if not sx.is_ident(sx.unparen(elem2), local2[0]):
                raise Refused("the exp-sum loop's local is not the element in the exponent")
            elem2 = local2[1]
        if _norm(_renamed(elem2, k, "@")) != _norm(_renamed(elem, j, "@")):
            raise Refused("the two loops read different elements")
        # declarations of m and s, their types and starts
        decl_of = {}
        for st in stmts[: k_idx]:
            if st.type != "declaration":
                continue
            for d in (c for c in st.children if c.type == "init_declarator"):
                decl_of[sx.text(d.child_by_field_name("declarator"))] = (st, d)
        if m not in decl_of or s not in decl_of:
            raise Refused(f"{m} and {s} are not declared in the loops' block")
        mtype = sx.text(decl_of[m][0].child_by_field_name("type"))
        stype = sx.text(decl_of[s][0].child_by_field_name("type"))
        if mtype != stype or mtype not in NEG_INF:
            raise Refused(f"{m} and {s} are not both float or both double")
        s_start = decl_of[s][1].child_by_field_name("value")
        if s_start is None or not sx.is_number(s_start, 0):
            raise Refused(f"the sum {s} does not start at 0")
        if sum_decl is not None and decl_of[s][0] is not sum_decl:
            raise Refused("a declaration other than the sum's between the loops")
        m_start = decl_of[m][1].child_by_field_name("value")
        if m_start is None:
            raise Refused(f"{m} has no start value")
        # E(a1 - 1) start: the fused loop begins one earlier, from -inf; a constant start: the same start, kept
        edits = []
        prevs = {f"{a1}-1"} | ({str(int(a1) - 1)} if a1.strip().isdigit() else set())  # the index before the max loop's first
        if _norm(sx.text(m_start)) in {_norm(_renamed(elem, j, p)) for p in prevs}:
            if _norm(a2) not in {_norm(p) for p in prevs}:
                raise Refused(f"the exp-sum loop does not start at the element {m} starts from")
            edits.append((m_start.start_byte, m_start.end_byte, NEG_INF[mtype].encode()))
        else:
            if not _constant(m_start):
                raise Refused(f"{m} starts neither from a constant nor from the first element")
            if _norm(a1) != _norm(a2):
                raise Refused("the max loop and the exp-sum loop start at different elements")
        # nothing else touches m, s or the element's inputs between the declarations and the second loop's end
        _pure(elem, {m, s}, _written_buffers(unit))
        for st in stmts[: i]:
            if st is decl_of[m][0] or st is decl_of[s][0]:
                continue
            if {m, s} & sx.identifiers(st):
                raise Refused(f"{m} or {s} is used between its declaration and the loops")
        for name in sx.identifiers(elem) - {j}:
            for st in stmts[: k_idx + 1]:
                if name in sx.written_names(st) and st not in (loop1, loop2) and st.type != "declaration":
                    raise Refused(f"{name}, read by the element expression, is written between the loops")
        if {m, s} & (sx.written_names(loop1.child_by_field_name("body")) - {m}) or m in sx.written_names(loop2):
            raise Refused(f"the loops write {m} or {s} otherwise")
        e_k = _renamed(elem, j, k)
        one = ONE[mtype]
        fused = (f"for ({sx.text(type2)} {k} = {a2}; {k} < {n2}; {k}++) {{\n"
                 f"        {mtype} ptxf_v = {e_k};  // (transform online_softmax: the max and the sum in one pass)\n"
                 f"        if (ptxf_v > {m}) {{\n"
                 f"            {s} = {s} * {exp}({m} - ptxf_v) + {one};\n"
                 f"            {m} = ptxf_v;\n"
                 f"        }} else {{\n"
                 f"            {s} += {exp}(ptxf_v - {m});\n"
                 f"        }}\n"
                 f"    }}")
        if sum_decl is not None:  # the sum's declaration moves before the fused loop
            fused = sx.text(sum_decl) + "\n    " + fused
        edits.append((loop1.start_byte, loop2.end_byte, fused.encode()))
        return edits


CONSTANTS = frozenset({"INFINITY", "FLT_MAX", "DBL_MAX", "HUGE_VALF", "HUGE_VAL", "__int_as_float", "__longlong_as_double"})


def _constant(node: Node) -> bool:
    """Whether ``node`` is a constant: literals, the float limits' macros, a bit pattern through __int_as_float."""
    for n in sx.walk(node):
        if n.type == "identifier" and sx.text(n) not in CONSTANTS:
            return False
        if n.type in ("subscript_expression", "pointer_expression", "field_expression", "assignment_expression"):
            return False
    return True


def _written_buffers(unit: Unit) -> set[str]:
    """Names written through a subscript or a dereference anywhere in the kernel (the buffers it writes)."""
    out = set()
    for n in sx.walk(unit.body):
        target = None
        if n.type == "assignment_expression":
            target = sx.unparen(n.child_by_field_name("left"))
        elif n.type == "update_expression":
            target = sx.unparen(n.child_by_field_name("argument"))
        through = False  # a write through a subscript or a pointer, not to a variable
        while target is not None and target.type in ("subscript_expression", "pointer_expression", "field_expression"):
            target, through = sx.unparen(target.child_by_field_name("argument")), True
        if through and target is not None and sx.is_ident(target):
            out.add(sx.text(target))
    return out
