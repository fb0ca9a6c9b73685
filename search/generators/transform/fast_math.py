"""``fast_math``: approximate single-precision intrinsics where the spec's tolerance absorbs them.

Rewrites (each recorded in ``unit.notes["fast_math_ops"]``):

- ``expf(x)`` -> ``__expf(x)`` (``ex2.approx`` of ``x * log2 e``: ~2 ulp plus ~1 ulp per unit of |x|);
- ``tanhf(x)`` -> ``ptxf_tanh_approx(x)``, inline PTX ``tanh.approx.f32`` (relative error <= 2^-10.99);
- ``1.0f / sqrtf(x)`` -> ``rsqrtf(x)`` (<= 2 ulp);
- ``a / b`` on floats (one operand float, the other float or integer) -> ``__fdividef(a, b)``
  (<= 2 ulp for |b| < 2^126).

Precondition: ``check.fast_math`` is true (every rewrite), or ``check.rtol`` at least the rewrite's floor
(:data:`OP_RTOL`, well above its error: ``rsqrtf`` and ``__fdividef`` from 1e-6, ``__expf`` from 1e-4, ``tanh.approx``
from 1e-3, about a quarter of a bf16 ulp); and at least one site to rewrite. Not exact.
Operand types come from the kernel's declarations (``syntax.Types``); a division whose operand
types are unknown or double is left alone, and so is any rewrite whose value goes, through arithmetic only, to an
integer (a cast, an integer variable) or to a rounding function: a bin index ``(int)(x / w)``.
"""
from __future__ import annotations

from . import syntax as sx
from .base import Unit
from .syntax import Node

# the smallest check.rtol under which each rewrite is made (without check.fast_math): ~4x its relative error or more
OP_RTOL = {"expf": 1e-4, "tanhf": 1e-3, "rsqrt": 1e-6, "fdividef": 1e-6}
RTOL_FLOOR = min(OP_RTOL.values())
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
    """``__expf``, ``tanh.approx.f32``, ``rsqrtf``, ``__fdividef`` when ``check.fast_math``, else each where ``rtol``
    reaches its floor (:data:`OP_RTOL`)."""

    name = "fast_math"
    group = "math"  # proposed alone, never in a chain (FOLLOW_UP_GROUPS): after each new best, "best -> fast_math"
    exact = False

    def allowed(self, unit: Unit, op: str | None = None) -> bool:
        """Whether the spec's tolerance allows rewrite ``op`` (any of them, when None)."""
        floor = RTOL_FLOOR if op is None else OP_RTOL[op]
        return unit.spec.check.fast_math or unit.spec.check.rtol >= floor

    def _rewriter(self, unit: Unit, used: set[str]):
        data, types = unit.data, unit.types
        ok = {op: self.allowed(unit, op) for op in OPS}

        def rewrite(node: Node) -> bytes | None:
            # (never a value an integer conversion or a floor takes: 2 ulp can cross an integer, :func:`_rounded`)
            name = sx.call_name(node)
            if name in ("expf", "tanhf") and len(sx.call_args(node)) == 1 and ok[name] and not _rounded(node, types):
                used.add(name)
                arg = sx.render(node.child_by_field_name("arguments"), data, rewrite)
                return (b"__expf" if name == "expf" else b"ptxf_tanh_approx") + arg
            if node.type == "binary_expression" and sx.operator(node) == "/" and not _rounded(node, types):
                num, den = node.child_by_field_name("left"), node.child_by_field_name("right")
                d = sx.unparen(den)
                if _is_float_one(num) and sx.call_name(d) == "sqrtf" and len(sx.call_args(d)) == 1 and ok["rsqrt"]:
                    used.add("rsqrt")
                    return b"rsqrtf" + sx.render(d.child_by_field_name("arguments"), data, rewrite)
                kinds = {types.of(num), types.of(den)}
                if "float" in kinds and kinds <= {"float", "int"} and ok["fdividef"]:
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


ROUNDING = frozenset({"floorf", "ceilf", "truncf", "roundf", "rintf", "lrintf", "lroundf", "floor", "ceil", "trunc", "round",
                      "rint", "__float2int_rn", "__float2int_rz", "__float2int_rd", "__float2int_ru", "__float2uint_rz"})


def _rounded(node: Node, types, memo: dict[str, bool] | None = None) -> bool:
    """Whether ``node``'s value, through arithmetic only, is converted to an integer (a cast, an integer variable's
    initialiser or assignment) or rounded (``floorf``, ...): a bin index ``(int)(x / w)``, where an approximation's
    last bits decide the integer, never a tolerance. A float variable it initialises or is assigned to carries it on:
    any use of that variable that is rounded counts (``scale = amax / 127; q = __float2int_rn(x / scale)``: an int8
    quantisation, where one ulp of the scale moves a rounding)."""
    child, p = node, node.parent
    while p is not None:
        if p.type in ("parenthesized_expression", "binary_expression", "unary_expression", "conditional_expression"):
            if p.type == "conditional_expression" and child.id == p.child_by_field_name("condition").id:
                return False
            child, p = p, p.parent
            continue
        if p.type == "cast_expression":
            return sx.type_text(p.child_by_field_name("type")) in sx.INT_TYPES
        if p.type == "argument_list":
            return (sx.call_name(p.parent) or "") in ROUNDING
        if p.type == "init_declarator":
            decl = p.parent
            if decl is not None and sx.type_text(decl.child_by_field_name("type")) in sx.INT_TYPES:
                return True
            return _uses_rounded(p.child_by_field_name("declarator"), types, {} if memo is None else memo)
        if p.type in ("assignment_expression", "compound_assignment_expression"):
            left = p.child_by_field_name("left")
            return types.of(left) == "int" or _uses_rounded(left, types, {} if memo is None else memo)
        return False
    return False


def _uses_rounded(target: Node | None, types, memo: dict[str, bool]) -> bool:
    """Whether a use of the variable ``target`` names (an identifier) anywhere in its function is :func:`_rounded`.
    ``memo``: each variable's answer, shared by one question's whole search (a variable under way counts as not
    rounded), so the work is bounded by the variables times their uses, whatever the kernel."""
    target = sx.unparen(target)
    if target is None or target.type != "identifier":
        return False
    name = sx.text(target)
    if name in memo:
        return memo[name]
    memo[name] = False
    fn = target
    while fn.parent is not None and fn.type != "function_definition":
        fn = fn.parent
    memo[name] = any(n.type == "identifier" and sx.text(n) == name and n.id != target.id and _rounded(n, types, memo)
                     for n in sx.walk(fn))
    return memo[name]


def _is_float_one(node: Node | None) -> bool:
    node = sx.unparen(node)
    return node is not None and node.type == "number_literal" and sx.text(node).lower().endswith("f") and sx.literal_value(node) == 1
