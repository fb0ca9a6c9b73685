"""``divmod``: the quotient and remainder of a strided loop's index by a loop-invariant divisor, carried from one
iteration to the next instead of divided each time (strength reduction).

Pattern: a loop ``for (T k = A; k < N; k += S) BODY`` (any condition) whose body reads ``k / d`` or ``k % d`` with ``d``
the same on every iteration: a flat index taken apart inside a grid-stride loop, rowpar's split of a ``collapse``-d nest
(``h = f / half, i = f % half``), a thread's loop over (row, column) pairs. A division by a value known only at run time
costs tens of instructions (a 64-bit one a call of about a hundred); the carried form costs an add, a compare and a
select per iteration::

    {
        const auto ptxf_dm_d0 = (d);
        if ((A) >= 0 && (S) > 0 && ptxf_dm_d0 > 0) {     // k >= 0 all along: / and % are floor division, carried exactly
            decltype(...) ptxf_dm_q0 = (T)(A) / ptxf_dm_d0, ptxf_dm_r0 = (T)(A) % ptxf_dm_d0;
            const ... ptxf_dm_sq0 = (S) / ptxf_dm_d0, ptxf_dm_sr0 = (S) % ptxf_dm_d0;   // once, before the loop
            for (T k = A; k < N; k += S, <r += sr, q += sq, and the carry when r passes d>) BODY  // k / d -> q, k % d -> r
        } else {
            for (T k = A; k < N; k += S) BODY                // as written (a negative start, step or divisor)
        }
    }

The carry compares ``r >= d - sr`` before adding, so no intermediate exceeds ``d`` (no overflow at any divisor). The
update rides in the loop's update expression, so ``continue`` keeps it. Exact: the same integers, every iteration.

Refused: the index written in the body; a start, step or divisor that reads a name the loop writes, calls a function or
has a side effect; a divisor that is a literal (the compiler already multiplies by a reciprocal); a loop whose index
is not declared in its header.
"""
from __future__ import annotations

from . import syntax as sx
from .base import Unit
from .syntax import Node
from .vector_loops import declared_index, reindent, unroll_pragma

PREFIX = "ptxf_dm"
PURE = ("identifier", "number_literal", "field_expression", "field_identifier", "parenthesized_expression", "binary_expression",
        "cast_expression", "type_descriptor", "primitive_type", "sized_type_specifier", "type_identifier",
        "unary_expression", "abstract_pointer_declarator", "type_qualifier")


class Refused(Exception):
    """The loop is left alone (the message says why)."""


class DivModPass:
    """Per-iteration ``k / d`` and ``k % d`` of a strided loop index -> a quotient and remainder carried across iterations."""

    name = "divmod"
    group = "divmod"  # optional, and tried after the chains without it (transform.UNPROVEN_GROUPS)
    exact = True

    def targets(self, unit: Unit) -> list[tuple[Node, dict]]:
        """``(loop, plan)`` for every loop the pass rewrites (outermost loops only: nested ones are rewritten on a later pass)."""
        if unit.body is None:
            return []
        out: list[tuple[Node, dict]] = []
        for n in sx.walk(unit.body):
            if n.type != "for_statement" or any(_inside(n, loop) for loop, _ in out):
                continue
            try:
                out.append((n, self.plan(unit, n)))
            except Refused:
                continue
        return out

    def refusal(self, unit: Unit) -> str | None:
        """Why no loop is rewritten (None when one is). (Not ``why_not``: that names the restructuring passes, whose
        refusals the report lists; this one keeps the work's layout.)"""
        if unit.body is None:
            return "no kernel body"
        reasons = []
        for n in sx.walk(unit.body):
            if n.type == "for_statement":
                try:
                    self.plan(unit, n)
                    return None
                except Refused as e:
                    reasons.append(f"line {n.start_point[0] + 1}: {e}")
        return "; ".join(reasons) or "no loop"

    def applies(self, unit: Unit) -> bool:
        return bool(self.targets(unit))

    def plan(self, unit: Unit, loop: Node) -> dict:
        """What the rewrite of ``loop`` needs: the index, its type, start, step and bound, and the divisors (raises
        :class:`Refused`)."""
        cond, upd, body = (loop.child_by_field_name(f) for f in ("condition", "update", "body"))
        index = declared_index(loop)
        if isinstance(index, str):
            raise Refused(index)
        ctype, k, start = index
        if ctype not in sx.INT_TYPES:
            raise Refused(f"index type {ctype!r}")
        if any(i.startswith(PREFIX) for i in sx.identifiers(loop)) or _inside_rewrite(loop):
            raise Refused("already carried (this pass's own loop, or the loop as written beside it)")
        u = sx.unparen(upd)
        if not (u.type == "assignment_expression" and sx.operator(u) == "+=" and sx.is_ident(sx.unparen(u.child_by_field_name("left")), k)):
            raise Refused("the step is not k += S")
        step = u.child_by_field_name("right")
        c = sx.unparen(cond)
        if c.type != "binary_expression" or sx.operator(c) not in ("<", "<=") or not sx.is_ident(sx.unparen(c.child_by_field_name("left")), k):
            raise Refused("the condition is not k < N (or k <= N)")
        bound = c.child_by_field_name("right")
        # names the loop may change: written or declared in it (a divisor declared in the body is another value each
        # iteration), and names reached through a pointer or a reference anywhere in the kernel
        varying = sx.written_names(body) | sx.written_names(cond) | sx.declared_names(body) | _aliased(unit.fn)
        if k in varying:
            raise Refused("the index is written, redeclared or aliased in the body")
        for what, e in (("start", start), ("step", step), ("bound", bound)):
            if not _pure(e) or (sx.identifiers(e) & varying) or k in sx.identifiers(e):
                raise Refused(f"the {what} {sx.text(e)!r} is not fixed for the loop")
        divisors: dict[str, list[Node]] = {}
        for n in sx.walk(body):
            if n.type != "binary_expression" or sx.operator(n) not in ("/", "%"):
                continue
            if not sx.is_ident(sx.unparen(n.child_by_field_name("left")), k):
                continue  # (a cast of the index, (int)k / d, is another value: left alone)
            d = sx.unparen(n.child_by_field_name("right"))
            if d is None or sx.is_number(d):
                continue  # a literal divisor: the compiler's reciprocal multiply is already cheap
            if not _pure(d) or (sx.identifiers(d) & varying) or k in sx.identifiers(d) or sx.in_lambda(n) \
                    or not _integral(unit, d):
                continue
            divisors.setdefault(" ".join(sx.text(d).split()), []).append(n)
        if not divisors:
            raise Refused("no k / d or k % d with an integer divisor fixed for the loop")
        return {"k": k, "ctype": ctype, "start": start, "step": step, "bound": bound, "divisors": divisors}

    def apply(self, unit: Unit) -> Unit:
        data = unit.data
        edits = []
        for loop, plan in self.targets(unit):
            pragma = unroll_pragma(loop)
            start = pragma.start_byte if pragma is not None else loop.start_byte
            edits.append((start, loop.end_byte, self._emit(unit, loop, plan, pragma).encode()))
        return unit.with_text(sx.apply_edits(data, edits))

    def _emit(self, unit: Unit, loop: Node, p: dict, pragma: Node | None) -> str:
        data = unit.data
        ind = sx.line_indent(data, loop.start_byte)[0].decode()
        i1, i2 = ind + "    ", ind + "        "
        t, a, s = p["ctype"], f"({sx.text(p['start'])})", f"({sx.text(p['step'])})"
        replace: dict[tuple[int, int], bytes] = {}
        decls, checks, carry = [], [f"({t}){a} >= 0", f"({t}){s} > 0"], []
        if t in sx.UNSIGNED_TYPES:  # an unsigned index wraps past its maximum, where the carried quotient would not
            checks.append(f"({t})({sx.text(p['bound'])}) <= ({t})~({t})0 - ({t}){s}")
        for m, (dtext, nodes) in enumerate(p["divisors"].items()):
            d, q, r, sq, sr = (f"{PREFIX}_{x}{m}" for x in ("d", "q", "r", "sq", "sr"))
            decls.append(f"{i1}const auto {d} = ({dtext});")
            checks.append(f"{d} > 0")
            for n in nodes:
                replace[(n.start_byte, n.end_byte)] = (q if sx.operator(n) == "/" else r).encode()
            carry += [(d, q, r, sq, sr)]
        lines = [f"{ind}{{  // {p['k']} / d and {p['k']} % d carried across iterations, not divided (transform divmod)"] + decls
        lines.append(f"{i1}if ({' && '.join(checks)}) {{  // a non-negative index: floor division, carried exactly")
        update = [sx.text(loop.child_by_field_name("update"))]
        for d, q, r, sq, sr in carry:
            qt = f"decltype(({t})0 / {d})"
            lines.append(f"{i2}{qt} {q} = ({t}){a} / {d}, {r} = ({t}){a} % {d};")
            lines.append(f"{i2}const {qt} {sq} = ({t}){s} / {d}, {sr} = ({t}){s} % {d};")
            update.append(f"{q} += {sq}, ({r} >= {d} - {sr} ? ({r} -= {d} - {sr}, ++{q}) : ({r} += {sr}))")
        header = _header_without_update(loop, data)
        body = loop.child_by_field_name("body")
        new_body = sx.render(body, data, lambda nd: replace.get((nd.start_byte, nd.end_byte))).decode()
        if pragma is not None:
            lines.append(sx.text(pragma).strip())
        lines.append(f"{i2}for ({header}; {', '.join(update)}) {reindent(new_body, ind, i2)}")
        lines.append(f"{i1}}} else {{  // a negative start, step or divisor: as written")
        if pragma is not None:
            lines.append(sx.text(pragma).strip())
        lines.append(f"{i2}{reindent(sx.text(loop), ind, i2)}")
        lines.append(f"{i1}}}")
        lines.append(f"{ind}}}")
        return "\n".join(lines)[len(ind):]


def _header_without_update(loop: Node, data: bytes) -> str:
    """``init; cond`` of the loop's header as written (the initializer's own ``;`` dropped)."""
    init, cond = loop.child_by_field_name("initializer"), loop.child_by_field_name("condition")
    i = data[init.start_byte:init.end_byte].decode().rstrip().rstrip(";")
    c = data[cond.start_byte:cond.end_byte].decode() if cond is not None else ""
    return f"{i}; {c}"


def _pure(node: Node | None) -> bool:
    """No call, assignment, increment or comma: evaluating it twice gives the same value and changes nothing."""
    if node is None:
        return False
    return all(n.type in PURE or not n.is_named for n in sx.walk(node)) and not any(
        n.type in ("assignment_expression", "update_expression", "comma_expression", "call_expression") for n in sx.walk(node))


def _aliased(fn: Node) -> set[str]:
    """Names whose address the kernel takes (``&d``) or that a reference binds (``int& r = d;``): they may change
    through another name."""
    out = set()
    for n in sx.walk(fn):
        if n.type == "pointer_expression" and sx.operator(n) == "&":
            arg = sx.unparen(n.child_by_field_name("argument"))
            if sx.is_ident(arg):
                out.add(sx.text(arg))
        elif n.type == "init_declarator" and (n.child_by_field_name("declarator") or n).type == "reference_declarator":
            out |= {sx.text(i) for i in sx.walk(n.child_by_field_name("value")) if i.type == "identifier"}
    return out


def _integral(unit: Unit, d: Node) -> bool:
    """Every name in ``d`` has an integer type (a built-in index such as ``blockDim.x`` does), so ``%`` applies."""
    for n in sx.walk(d):
        if n.type == "identifier" and not (n.parent is not None and n.parent.type == "field_expression"):
            if unit.types.scalar.get(sx.text(n)) not in sx.INT_TYPES:
                return False
        elif n.type == "field_expression" and not any(sx.is_builtin(n, v, f) for v in ("blockDim", "gridDim", "threadIdx",
                                                                                          "blockIdx") for f in "xyz"):
            return False
        elif n.type == "number_literal" and not isinstance(sx.literal_value(n), int):
            return False
    return True


def _inside_rewrite(loop: Node) -> bool:
    """``loop`` is under this pass's dispatch (an ``if`` whose condition reads its divisor variables)."""
    p = loop.parent
    while p is not None:
        if p.type == "if_statement" and any(i.startswith(PREFIX) for i in sx.identifiers(p.child_by_field_name("condition"))):
            return True
        p = p.parent
    return False


def _inside(node: Node, outer: Node) -> bool:
    return outer.start_byte <= node.start_byte and node.end_byte <= outer.end_byte


