"""``restrict``: ``__restrict__`` on every pointer parameter, ``const`` on pointees never written through.

Why it is safe: the verifier (and any sane caller) passes distinct, non-overlapping buffers for
distinct arguments, which is exactly what ``__restrict__`` promises; ``const`` is added only where
every use of the pointer is a read of ``p[i]`` / ``*p`` (or a load intrinsic), and only for kernels
with C linkage, where the pointee's qualifiers do not enter the symbol name. Exact: the compiler
may reorder loads, never change a value.
"""
from __future__ import annotations

from .base import Unit
from . import syntax as sx


class RestrictPass:
    """``__restrict__`` on pointer parameters (and ``const`` on read-only pointees of C-linkage kernels)."""

    name = "restrict"
    group = None
    exact = True

    def _edits(self, unit: Unit) -> list[tuple[int, int, bytes]]:
        edits = []
        for p in unit.pointers.values():
            if not p.has_restrict:
                ident = p.pointer_decl.child_by_field_name("declarator")
                edits.append((ident.start_byte, ident.start_byte, b"__restrict__ "))
            if unit.c_linkage and not p.is_const and p.read_only and set(p.qualifiers) <= {"const"}:
                edits.append((p.decl.start_byte, p.decl.start_byte, b"const "))
        return edits

    def applies(self, unit: Unit) -> bool:
        return unit.fn is not None and bool(self._edits(unit))

    def apply(self, unit: Unit) -> Unit:
        return unit.with_text(sx.apply_edits(unit.data, self._edits(unit)))
