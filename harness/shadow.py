"""The original kernel's float64 shadow: the user's source with its scalar ``float`` arithmetic carried in ``double``.

Where the original kernel is the oracle (``check.reference = "kernel"``), its own rounding is part of every answer it
gives: a serial fp32 sum over a row of 10^6 values drifts ~5e-4 from the exact sum (seen on an H200, 2026-12-05), and
a tree or Welford reduction of the same row, closer to the exact sum, was then rejected against a tolerance of 1e-4.
The shadow is the same source with every scalar ``float`` (locals, parameters and returns of functions, casts,
``static_cast<float>``) declared ``double``, the ``f`` suffix dropped from float literals and the single-precision
math functions and intrinsics replaced by their double versions (``expf`` -> ``exp``, ``__fdividef(a, b)`` ->
a double helper, ``rsqrtf`` -> ``rsqrt``). Buffers keep their types: pointers, arrays (``__shared__`` ones too: their
sizes and byte offsets stay the original's) and the vector types (``float4``) are untouched, so the shadow reads and
writes the same memory as the original, with the same launch.

The verifier (:mod:`.gpu_eval`) uses it only to judge the elements of a floating-point output that miss the tolerance
against the original (:func:`judge_against_shadow`): such an element passes where it is within the tolerance of the
shadow or no further from it than twice the original is, and only where the original's own distance from the shadow
there is a drift of a few tolerances (:data:`SHADOW_SPAN`), not another function. A shadow that disagrees with the original beyond the
tolerance at the spec's check sizes (where rounding is small) is not used for that job.

Refused (None) where the rewrite could change what the code means: bit reinterpretation (``__float_as_int``,
``__int_as_float``, ``__float_as_uint``, ``__uint_as_float``, a ``union``, ``memcpy``, a pointer cast of an address,
``reinterpret_cast<T&>``), ``sizeof`` of a float type, a ``float``
template argument other than a cast's (``foo<float>``), inline ``asm`` (its operands' types are fixed), and a source
the parser reads with errors.
"""
from __future__ import annotations

import re

import numpy as np

from . import reference as R
from .cexpr import Node, walk
from .source import _parser

SHADOW_SPAN = 64.0  # the original's max |error| against the shadow, in tolerances (atol + rtol |shadow|), past which
# the shadow is read as computing another function (a rewrite that changed the meaning), never as the original's drift

# single-precision math -> double (the CUDA math API's double functions); intrinsics with an exact double meaning
MATH = {
    **{f"{name}f": name for name in (
        "exp", "exp2", "exp10", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "cbrt", "rcbrt", "sin",
        "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "pow",
        "fabs", "fmax", "fmin", "fma", "floor", "ceil", "trunc", "round", "rint", "nearbyint", "fmod", "remainder",
        "hypot", "erf", "erfc", "erfinv", "erfcinv", "lgamma", "tgamma", "copysign", "fdim", "norm3d", "rnorm3d",
        "sinpi", "cospi", "normcdf", "normcdfinv", "ldexp", "scalbn", "logb", "nextafter")},
    "__expf": "exp", "__exp10f": "exp10", "__logf": "log", "__log2f": "log2", "__log10f": "log10", "__sinf": "sin",
    "__cosf": "cos", "__tanf": "tan", "__powf": "pow", "__tanhf": "tanh", "__fsqrt_rn": "sqrt", "__frsqrt_rn": "rsqrt",
    "__fsqrt_rz": "sqrt", "__fsqrt_ru": "sqrt", "__fsqrt_rd": "sqrt", "__fmaf_rn": "fma", "__fmaf_rz": "fma",
    "__fmaf_ru": "fma", "__fmaf_rd": "fma",
}
# the double helpers of the prelude each renamed function calls: one of each name, not overloaded (``fmax(double,
# float)`` is ambiguous between the CUDA headers' float and double overloads; a helper's double parameters convert)
_TWO = {"atan2", "pow", "fmax", "fmin", "fmod", "remainder", "hypot", "copysign", "fdim", "nextafter"}
_THREE = {"fma", "norm3d", "rnorm3d"}
_WITH_INT = {"ldexp", "scalbn"}
_OPS = {"div": "a / b", "mul": "a * b", "add": "a + b", "sub": "a - b"}
# intrinsics that are an operator on their arguments
OPERATORS = {f"__f{op}_{mode}": f"ptxf_shadow_{op}" for op in _OPS for mode in ("rn", "rz", "ru", "rd")}
OPERATORS.update({"__fdividef": "ptxf_shadow_div", **{f"__frcp_{m}": "ptxf_shadow_rcp" for m in ("rn", "rz", "ru", "rd")},
                  "__saturatef": "ptxf_shadow_saturate"})
OPERATORS.update({name: f"ptxf_shadow_{double}" for name, double in MATH.items()})


def _helper(name: str) -> str:
    """The prelude's definition of helper ``name`` (``ptxf_shadow_...``)."""
    op = name.removeprefix("ptxf_shadow_")
    head = "static __device__ __forceinline__ double"
    if op in _OPS:
        return f"{head} {name}(double a, double b) {{ return {_OPS[op]}; }}\n"
    if op == "rcp":
        return f"{head} {name}(double a) {{ return 1.0 / a; }}\n"
    if op == "saturate":
        return f"{head} {name}(double a) {{ return ::fmin(::fmax(a, 0.0), 1.0); }}\n"
    if op in _TWO:
        return f"{head} {name}(double a, double b) {{ return ::{op}(a, b); }}\n"
    if op in _THREE:
        return f"{head} {name}(double a, double b, double c) {{ return ::{op}(a, b, c); }}\n"
    if op in _WITH_INT:
        return f"{head} {name}(double a, int b) {{ return ::{op}(a, b); }}\n"
    return f"{head} {name}(double a) {{ return ::{op}(a); }}\n"


REINTERPRET = re.compile(r"\b(__float_as_int|__int_as_float|__float_as_uint|__uint_as_float|union|memcpy)\b"
                         r"|reinterpret_cast\s*<[^>]*&\s*>|\(\s*[\w\s]+\*\s*\)\s*&")  # type punning of a scalar
_FLOAT_LITERAL = re.compile(r"^[-+]?(?:\d+\.\d*|\.\d+|\d+\.?\d*[eE][+-]?\d+|\d+\.\d*[eE][+-]?\d+|\.\d+[eE][+-]?\d+)[fF]$")


MEMORY = (b"__shared__", b"__constant__", b"__device__", b"extern")  # a declaration of memory, not of a scalar


def _cast_template(descriptor: Node) -> bytes | None:
    """The name of the template that the type descriptor ``descriptor`` is the argument of (``static_cast`` in
    ``static_cast<float>(x)``, ``foo`` in ``foo<float>()``), or None where it is no template argument."""
    args = descriptor.parent
    if args is None or args.type != "template_argument_list" or args.parent is None:
        return None
    name = args.parent.child_by_field_name("name")
    return name.text if name is not None else b""


def _is_scalar_float(node: Node) -> bool:
    """Whether the ``float`` type node ``node`` declares a scalar (not a pointer, array or reference to memory)."""
    parent = node.parent
    if parent is None:
        return False
    if parent.type in ("declaration", "parameter_declaration", "function_definition", "optional_parameter_declaration"):
        if parent.type in ("parameter_declaration", "optional_parameter_declaration") and _in_kernel_signature(parent):
            return False  # the kernel's own parameters are the spec's arguments, passed as they are
        if parent.type == "declaration" and any(
                c.type in ("type_qualifier", "storage_class_specifier", "attribute_specifier") and c.text in MEMORY
                for c in parent.children):
            return False  # shared, constant, global or extern memory: its layout and size stay the original's
        declarators = [parent.child_by_field_name("declarator")] if parent.type != "declaration" else \
            [c for c in parent.named_children if c.type in ("init_declarator", "identifier", "pointer_declarator",
                                                            "array_declarator", "reference_declarator",
                                                            "function_declarator")]
        for d in declarators:
            if d is None:
                continue
            inner = d.child_by_field_name("declarator") if d.type == "init_declarator" else d
            if inner is None or inner.type in ("pointer_declarator", "array_declarator", "reference_declarator",
                                               "abstract_pointer_declarator"):
                return False
            if inner.type == "function_declarator" and parent.type == "declaration":
                return False  # a prototype: its definition is rewritten where it is
        return bool(declarators)
    if parent.type == "type_descriptor" and parent.child_by_field_name("declarator") is None:
        # (float)x and static_cast<float>(x); never (float*)p
        return parent.parent is not None and parent.parent.type == "cast_expression" \
            or _cast_template(parent) == b"static_cast"
    return False


def _in_kernel_signature(param: Node) -> bool:
    """Whether the parameter declaration ``param`` belongs to a ``__global__`` function's parameter list."""
    n = param.parent
    while n is not None and n.type not in ("function_definition", "declaration", "compound_statement"):
        n = n.parent
    return n is not None and n.type in ("function_definition", "declaration") and any(
        c.type == "__global__" or c.text == b"__global__" for c in n.children)


def promoted_source(source: str) -> str | None:
    """``source`` (a CUDA translation unit) with its scalar float arithmetic in double, or None where it is refused
    (module docstring). Pure text in, text out; bounded by the source's size."""
    if REINTERPRET.search(source) or re.search(r"\bsizeof\s*\(\s*float\b|\basm\b", source):
        return None
    data = source.encode()
    root = _parser().parse(data).root_node
    if root.has_error:
        return None
    edits: list[tuple[int, int, bytes]] = []
    helpers: set[str] = set()
    for n in walk(root):
        if n.type == "primitive_type" and n.text == b"float":
            if _is_scalar_float(n):
                edits.append((n.start_byte, n.end_byte, b"double"))
            elif n.parent.type == "type_descriptor" and n.parent.child_by_field_name("declarator") is None \
                    and _cast_template(n.parent) not in (None, b"static_cast", b"reinterpret_cast", b"const_cast"):
                return None  # foo<float>(...): a template whose instance would change
        elif n.type == "number_literal" and _FLOAT_LITERAL.match(n.text.decode()):
            edits.append((n.end_byte - 1, n.end_byte, b""))
        elif n.type == "call_expression":
            fn = n.child_by_field_name("function")
            name = fn.text.decode() if fn is not None and fn.type == "identifier" else None
            renamed = OPERATORS.get(name)
            if renamed is not None:
                edits.append((fn.start_byte, fn.end_byte, renamed.encode()))
                helpers.add(renamed)
    if not edits:
        return None  # nothing in float: the shadow would be the original
    out = bytearray(data)
    for start, end, new in sorted(edits, reverse=True):
        out[start:end] = new
    return _with_prelude(out.decode(), "".join(_helper(h) for h in sorted(helpers)))


def _with_prelude(source: str, prelude: str) -> str:
    """``source`` with ``prelude`` after its last ``#include`` line (or first, where it has none)."""
    lines = source.splitlines(keepends=True)
    at = max((i + 1 for i, line in enumerate(lines) if line.lstrip().startswith("#include")), default=0)
    return "".join(lines[:at]) + prelude + "".join(lines[at:])


def shadow_compiled(spec, baseline):
    """The float64 shadow of the original ``baseline`` (a :class:`.compile.Compiled` of the user's kernel, compiled
    as the job compiled it), compiled with the same options, or None: where the spec's oracle is not the kernel, its
    tolerances are zero, no output is a floating-point one, the source is refused (:func:`promoted_source`), or the shadow does not compile.
    Runs NVRTC: call it off the event loop (the job's compile pool)."""
    from .compile import Compiled, compile_candidate

    floats = {"f32", "f16", "bf16", "f64"}
    if spec.check.rtol == 0 and spec.check.atol == 0:
        return None  # bit for bit: no rounding of the original's is the user's to forgive
    if str(spec.check.reference) != "kernel" or not any(
            a.role in ("out", "inout") and a.dtype.value in floats for a in spec.args):
        return None
    original = baseline.candidate
    if baseline.compiler not in ("nvrtc", "nvcc"):
        return None  # a PTX kernel: its arithmetic's types are in its instructions
    source = promoted_source(original.source)
    if source is None:
        return None
    out = compile_candidate(original.model_copy(update={"source": source, "generator": "shadow",
                                                        "description": "the original's float64 shadow"}),
                            spec.arch, spec.check.fast_math)
    return out if isinstance(out, Compiled) else None


def judge_against_shadow(got, want, truth, dtype: str, rtol: float, atol: float, unwritten=None) -> tuple[bool, str]:
    """Whether a candidate's floating-point output ``got`` passes against the shadow's ``truth``, the original's being
    ``want`` (flat arrays of values, :func:`.reference.values`; NumPy or CuPy alike), element by element. An element
    passes where it is within the tolerance of the original; else, only where the shadow may judge it (the
    candidate, the original and the shadow all finite there, the candidate's element written, and the original
    within :data:`SHADOW_SPAN` tolerances ``atol + rtol |truth_i|`` of the shadow: its rounding, not another
    function), where it is within the tolerance of the shadow or no further from it than twice the original is
    (the Python reference's "no less accurate" factor, per element). Every other element keeps its verdict against
    the original. Integer outputs are never judged here (exact). Returns (passes, a clause for a rejection's reason:
    empty when it passes).

    Raises:
        ValueError: the three arrays hold different numbers of elements."""
    xp = R._module(truth)
    c, o, t = (xp.asarray(a).reshape(-1).astype(xp.float64) for a in (got, want, truth))
    if not (c.size == o.size == t.size):
        raise ValueError(f"judge_against_shadow: {c.size}, {o.size} and {t.size} elements")
    with np.errstate(invalid="ignore", over="ignore"):
        tol = atol + rtol * xp.abs(t)
        finite = xp.isfinite(c) & xp.isfinite(o) & xp.isfinite(t)
        if unwritten is not None:
            finite &= ~xp.asarray(unwritten).reshape(-1)
        drift = xp.where(finite, xp.abs(o - t), xp.inf)
        err = xp.where(finite, xp.abs(c - t), xp.inf)
        by_original = (c == o) | (finite & (xp.abs(c - o) <= atol + rtol * xp.abs(o)))
        judged = finite & (drift <= SHADOW_SPAN * tol)
        by_shadow = judged & ((err <= tol) | (err <= R.ACCURACY_FACTOR * drift))
        bad = ~(by_original | by_shadow)
    wrong = int(bad.sum())
    if wrong == 0:
        return True, ""
    unjudged = int((bad & ~judged).sum())
    worst_c = float(xp.max(xp.where(bad & judged, err, 0.0)))
    worst_o = float(xp.max(xp.where(bad & judged, drift, 0.0)))
    if unjudged == wrong:
        return False, (f"; the original's float64 shadow does not judge those elements (the original is more than "
                       f"{SHADOW_SPAN:g} tolerances from it there, or a value is not finite)")
    return False, (f"; against the original's float64 shadow {wrong} elements still wrong, the worst "
                   f"{worst_c:.3g} from it where the original is {worst_o:.3g}")
