"""``fast_math``: approximate single-precision intrinsics where the spec's tolerance absorbs them.

Rewrites (each recorded in ``unit.notes["fast_math_ops"]``):

- ``expf(x)`` -> ``__expf(x)`` (``ex2.approx`` of ``x * log2 e``: ~2 ulp plus ~1 ulp per unit of |x|);
- ``tanhf(x)`` -> ``ptxf_tanh_approx(x)``, inline PTX ``tanh.approx.f32`` (relative error <= 2^-10.99);
- ``1.0f / sqrtf(x)`` -> ``rsqrtf(x)`` (<= 2 ulp);
- ``a / b`` on floats (one operand float, the other float or integer) -> ``__fdividef(a, b)``
  (<= 2 ulp for |b| < 2^126).

Precondition: ``check.fast_math`` is true, or ``check.rtol >= 1e-3``: a tolerance well above these
errors (about one bf16 ulp is 2^-8 = 3.9e-3); and at least one site to rewrite. Not exact.
Operand types come from the kernel's declarations (``syntax.Types``); a division whose operand
types are unknown or double is left alone.
"""
from __future__ import annotations

from . import syntax as sx
from .base import Unit
from .syntax import Node

RTOL_FLOOR = 1e-3
TANH_HELPER = (
    "ptxf_tanh_approx",
    "static __device__ __forceinline__ float ptxf_tanh_approx(float x)\n"
    "{  // tanh.approx.f32 (sm_75+): max relative error 2^-10.99\n"
    "    float y;\n"
    "    asm(\"tanh.approx.f32 %0, %1;\" : \"=f\"(y) : \"f\"(x));\n"
    "    return y;\n"
    "}",
)
OPS = ("expf", "tanhf", "rsqrt", "fdividef")


class FastMathPass:
    """``__expf``, ``tanh.approx.f32``, ``rsqrtf``, ``__fdividef`` when ``check.fast_math`` or ``rtol >= 1e-3``."""

    name = "fast_math"
    group = None
    exact = False

    def allowed(self, unit: Unit) -> bool:
        return unit.spec.check.fast_math or unit.spec.check.rtol >= RTOL_FLOOR

    def _rewriter(self, unit: Unit, used: set[str]):
        data, types = unit.data, unit.types

        def rewrite(node: Node) -> bytes | None:
            name = sx.call_name(node)
            if name in ("expf", "tanhf") and len(sx.call_args(node)) == 1:
                used.add(name)
                arg = sx.render(node.child_by_field_name("arguments"), data, rewrite)
                return (b"__expf" if name == "expf" else b"ptxf_tanh_approx") + arg
            if node.type == "binary_expression" and sx.operator(node) == "/":
                num, den = node.child_by_field_name("left"), node.child_by_field_name("right")
                d = sx.unparen(den)
                if _is_float_one(num) and sx.call_name(d) == "sqrtf" and len(sx.call_args(d)) == 1:
                    used.add("rsqrt")
                    return b"rsqrtf" + sx.render(d.child_by_field_name("arguments"), data, rewrite)
                kinds = {types.of(num), types.of(den)}
                if "float" in kinds and kinds <= {"float", "int"}:
                    used.add("fdividef")
                    return b"__fdividef(" + sx.render(num, data, rewrite) + b", " + sx.render(den, data, rewrite) + b")"
            return None

        return rewrite

    def _rewrite(self, unit: Unit) -> tuple[bytes, list[str]]:
        used: set[str] = set()
        new = sx.render(unit.body, unit.data, self._rewriter(unit, used))
        data = unit.data
        return data[: unit.body.start_byte] + new + data[unit.body.end_byte :], [op for op in OPS if op in used]

    def applies(self, unit: Unit) -> bool:
        return unit.body is not None and self.allowed(unit) and bool(self._rewrite(unit)[1])

    def apply(self, unit: Unit) -> Unit:
        data, ops = self._rewrite(unit)
        helpers = [TANH_HELPER] if "tanhf" in ops else []
        return unit.with_text(data, helpers=helpers, fast_math_ops="+".join(ops))


def _is_float_one(node: Node | None) -> bool:
    node = sx.unparen(node)
    return node is not None and node.type == "number_literal" and sx.text(node).lower().endswith("f") and sx.literal_value(node) == 1
