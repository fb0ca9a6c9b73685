"""``launch_bounds``: ``__launch_bounds__(N)`` when every launch of the kernel uses a fixed block of N threads.

ptxas then budgets registers for N threads instead of 1024 (up to 255 per thread at N <= 256), which
can remove spills or let it keep more loads in flight. Exact: code generation changes, arithmetic does
not. The "tune" generator reads the bound and never proposes a larger block for such a kernel.
"""
from __future__ import annotations

from . import syntax as sx
from .base import Unit


class LaunchBoundsPass:
    """``__launch_bounds__(threads per block)`` for a launch whose block is integer literals (at most 1024 threads)."""

    name = "launch_bounds"
    group = None
    exact = True

    def applies(self, unit: Unit) -> bool:
        n = unit.block_threads()
        fn = unit.fn
        return (
            fn is not None and n is not None and 1 <= n <= 1024
            and not any(c.type == "launch_bounds" for c in fn.children) and sx.function_declarator(fn) is not None
        )

    def apply(self, unit: Unit) -> Unit:
        decl = unit.fn.child_by_field_name("declarator")
        edit = (decl.start_byte, decl.start_byte, f"__launch_bounds__({unit.block_threads()}) ".encode())
        return unit.with_text(sx.apply_edits(unit.data, [edit]))
