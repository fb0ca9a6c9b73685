"""``promote``: an element of a buffer that a loop updates at one fixed index is kept in a register for the loop.

Pattern (a naive kernel accumulating straight into its output)::

    for (int j = a; j < n; j++)
        y[r] += x[r * n + j];              // or y[r] = y[r] + ..., y[r] = fmaxf(y[r], ...), y[r]++ ...

where every access of the pointer parameter ``y`` in the loop is ``y[E]`` with one index ``E`` that the loop
never changes (no variable of it written in the loop, no call, no assignment), at least one of them a write,
becomes::

    T ptxf_reg0 = y[r];                    // T: y's element type as the kernel declares it; a store
    for (int j = a; j < n; j++)            // y[r] = v; right before the loop is folded: T ptxf_reg0 = v;
        ptxf_reg0 += x[r * n + j];
    y[r] = ptxf_reg0;

(in a block of its own where the loop is a statement alone, ``if (c) for (...) ...``).
Without ``__restrict__`` the compiler must load and store ``y[r]`` on every iteration (``x`` may alias it); the
spec's buffers are distinct allocations (what ``restrict`` relies on too), so the loop's other reads never see
``y[r]``. The accumulator is then a local variable, which ``rowpar``/``smem_tile`` recognise as a reduction.
Exact: the same operations in the same order, in the element's own type.

Refused (the loop is left alone) when the loop holds a barrier, a warp collective, an atomic, ``asm``, a
``return`` or ``goto``, or accesses the pointer at another index; and for a pointer used otherwise anywhere in the
kernel (passed to a function, address taken, an alias such as ``y + r * N``), or not a buffer of the spec.
"""
from __future__ import annotations

import re

from . import syntax as sx
from .base import Unit
from .syntax import Node


class PromotePass:
    """A loop-invariant element a loop updates -> a register for the loop, stored once after it."""

    name = "promote"
    group = None
    exact = True

    def applies(self, unit: Unit) -> bool:
        return unit.body is not None and bool(self._edits(unit))

    def apply(self, unit: Unit) -> Unit:
        return unit.with_text(sx.apply_edits(unit.data, self._edits(unit)))

    def _edits(self, unit: Unit) -> list[tuple[int, int, bytes]]:
        params = unit.pointers
        buffers = {a.name for a in unit.spec.args if a.is_buffer}
        edits: list[tuple[int, int, bytes]] = []
        taken: list[tuple[int, int]] = []  # loops rewritten (a loop inside one is left to the outer's rewrite)
        fresh = 0
        loops = [n for n in sx.walk(unit.body) if n.type in ("for_statement", "while_statement", "do_statement")]
        for loop in loops:
            if any(s <= loop.start_byte and loop.end_byte <= e for s, e in taken):
                continue
            if not self._safe(loop):
                continue
            written = sx.written_names(loop) | sx.declared_names(loop)  # (an index declared in the loop changes too)
            promoted = []
            for name, p in params.items():
                if name not in buffers or p.other:  # an alias (y + r * N), a call taking y: the loop might reach y[E] otherwise
                    continue
                site = self._site(loop, name, written)
                if site is not None:
                    promoted.append((name, p, site))
            if not promoted:
                continue
            head, tail, body_edits = [], [], []
            prev = loop.prev_named_sibling if loop.parent is not None and loop.parent.type == "compound_statement" else None
            for name, p, (index, accesses) in promoted:
                while re.search(rf"\bptxf_reg{fresh}\b", unit.text):  # a name no earlier pass (smem_tile's ptxf_p0) took
                    fresh += 1
                var = f"ptxf_reg{fresh}"
                fresh += 1
                ctype = p.base
                start = self._stored_before(prev, name, index)
                if start is not None:  # y[r] = v; right before the loop: the register starts at v, the store goes
                    head.append(f"{ctype} {var} = {start};")
                    edits.append((prev.start_byte, prev.end_byte, b""))
                    prev = None
                else:
                    head.append(f"{ctype} {var} = {name}[{index}];")
                tail.append(f"{name}[{index}] = {var};")
                body_edits += [(a.start_byte, a.end_byte, var.encode()) for a in accesses]
            indent, _ = sx.line_indent(unit.data, loop.start_byte)
            pad = indent.decode()
            loop_text = sx.apply_edits(loop.text, [(s - loop.start_byte, e - loop.start_byte, b) for s, e, b in body_edits]).decode()
            start_byte = loop.start_byte
            pragma = sx.pragma_before(loop)
            if pragma is not None:  # #pragma unroll stays right above its loop: the register goes above both
                start_byte = pragma.start_byte
                loop_text = sx.text(pragma).rstrip() + "\n" + pad + loop_text
            note = "// (transform promote: " + ", ".join(f"{n}[{i}]" for n, _, (i, _) in promoted) + " in a register for the loop)"
            if loop.parent is not None and loop.parent.type == "compound_statement":  # statements beside the loop's
                block = (note + "\n" + "".join(f"{pad}{h}\n" for h in head) + pad + loop_text + "\n"
                         + "\n".join(f"{pad}{t}" for t in tail))
            else:  # the loop is a statement of its own (if (c) for ...): a block in its place
                block = ("{  " + note + "\n" + "".join(f"{pad}    {h}\n" for h in head)
                         + f"{pad}    " + loop_text.replace("\n", "\n    ") + "\n"
                         + "".join(f"{pad}    {t}\n" for t in tail) + f"{pad}}}")
            edits.append((start_byte, loop.end_byte, block.encode()))
            taken.append((start_byte, loop.end_byte))
        return edits

    @staticmethod
    def _stored_before(stmt: Node | None, name: str, index: str) -> str | None:
        """The value ``v`` of a statement ``name[index] = v;`` (``v`` free of ``name``, calls and assignments), else None."""
        if stmt is None or stmt.type != "expression_statement" or not stmt.named_children:
            return None
        a = sx.unparen(stmt.named_children[0])
        if a.type != "assignment_expression" or sx.operator(a) != "=":
            return None
        left, right = sx.unparen(a.child_by_field_name("left")), a.child_by_field_name("right")
        if left.type != "subscript_expression" or not sx.is_ident(left.child_by_field_name("argument"), name) \
                or sx.compact(sx.subscript_index(left)) != re.sub(r"\s+", "", index):
            return None
        if name in sx.identifiers(right) or any(n.type in ("call_expression", "assignment_expression", "update_expression")
                                                for n in sx.walk(right)):
            return None
        return sx.text(right)

    @staticmethod
    def _safe(loop: Node) -> bool:
        """No barrier, collective, atomic, asm, return or goto in the loop."""
        for n in sx.walk(loop):
            if n.type in ("return_statement", "goto_statement", "gnu_asm_expression", "asm_statement"):
                return False
            if n.type == "call_expression" and sx.UNSAFE_CALL.match(sx.call_name(n) or ""):
                return False
        return True

    @staticmethod
    def _site(loop: Node, name: str, written: set[str]) -> tuple[str, list[Node]] | None:
        """``(index text, the y[E] nodes)`` when every use of ``name`` in ``loop`` is ``name[E]`` with one
        loop-invariant ``E`` and one of them is written; else None."""
        accesses, index, wrote = [], None, False
        for n in sx.walk(loop):
            if n.type != "identifier" or sx.text(n) != name:
                continue
            sub = n.parent
            if sub is None or sub.type != "subscript_expression" or sub.child_by_field_name("argument") != n:
                return None  # passed, dereferenced, offset: another use
            idx = sx.subscript_index(sub)
            if idx is None:
                return None
            key = sx.compact(idx)
            if index is None:
                index = key
                if sx.identifiers(idx) & written:
                    return None  # the index changes in the loop
                if any(c.type in ("call_expression", "assignment_expression", "update_expression", "subscript_expression")
                       for c in sx.walk(idx)):
                    return None  # a read or a side effect in the index: kept as it is
            elif key != index:
                return None
            accesses.append(sub)
            up = sub.parent
            while up is not None and up.type == "parenthesized_expression":
                up = up.parent
            if up is not None and ((up.type == "assignment_expression" and up.child_by_field_name("left") == sub)
                                   or up.type == "update_expression"):
                wrote = True
            if up is not None and up.type == "pointer_expression":
                return None  # &y[E]
        if not accesses or not wrote:
            return None
        return sx.text(sx.subscript_index(accesses[0])), accesses
