"""Syntax-tree helpers for the transform passes: parsing, walking, byte-range edits, a little type inference.

Every pass reads the tree-sitter-cuda tree of one kernel definition and edits the text by the byte
ranges of its nodes; nothing here matches structure with regular expressions. Texts are handled as
``bytes`` (tree-sitter's offsets are byte offsets) and decoded once at the end.
"""
from __future__ import annotations

import re

from collections.abc import Callable
from functools import lru_cache

import tree_sitter as ts
import tree_sitter_cuda

# the node helpers the harness reads C expressions with too (the scaffold's index extents): one definition
from ptxfactory.harness import cexpr
from ptxfactory.harness.cexpr import (  # noqa: F401
    clause_value, conjuncts, int_constant, literal_value, operator, text, uncast, unparen, walk, written_names,
)

Node = ts.Node

LOOPS = ("for_statement", "while_statement", "do_statement", "for_range_loop")
BARRIERS = ("__syncthreads", "__syncthreads_count", "__syncthreads_and", "__syncthreads_or", "__syncwarp", "__barrier_sync")
# calls whose meaning depends on which threads of a block or warp run them together
COLLECTIVES = BARRIERS + ("__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync", "__ballot_sync",
                          "__any_sync", "__all_sync", "__activemask", "__reduce_add_sync", "__match_any_sync")
INT_TYPES = frozenset({
    "int", "unsigned", "unsigned int", "signed", "signed int", "long", "long int", "unsigned long", "long long",
    "long long int", "unsigned long long", "unsigned long long int", "size_t", "ptrdiff_t", "int32_t", "uint32_t",
    "int64_t", "uint64_t", "short", "unsigned short", "char", "signed char", "unsigned char", "int8_t", "uint8_t",
})
UNSIGNED_TYPES = frozenset({
    "unsigned", "unsigned int", "unsigned long", "unsigned long long", "unsigned long long int", "size_t", "uint32_t",
    "uint64_t", "unsigned short", "unsigned char", "uint8_t",
})
WIDE_INT_TYPES = frozenset({
    "long", "long int", "unsigned long", "long long", "long long int", "unsigned long long", "unsigned long long int",
    "size_t", "ptrdiff_t", "int64_t", "uint64_t",
})
# Functions whose result is a float (CUDA math API, single precision, and the usual conversions).
FLOAT_FUNCS = frozenset({
    "expf", "__expf", "exp2f", "exp10f", "expm1f", "logf", "__logf", "log2f", "log10f", "log1pf", "sqrtf", "rsqrtf",
    "cbrtf", "fmaxf", "fminf", "fabsf", "tanhf", "tanf", "sinf", "cosf", "__sinf", "__cosf", "erff", "erfcf", "powf",
    "__powf", "fmaf", "__fdividef", "__frcp_rn", "floorf", "ceilf", "truncf", "roundf", "rintf", "copysignf",
    "__bfloat162float", "__half2float", "__int_as_float", "__uint_as_float", "__int2float_rn", "__saturatef",
    "ptxf_tanh_approx",
})
# Calls whose result depends on their arguments' values only (no memory, no side effect): the float functions, the
# double-precision and integer math of CUDA's device library, and the conversion and reinterpretation intrinsics.
# What every pass that asks "may this call sit in an expression it moves or repeats" reads (plus its own loads).
VALUE_FUNCS = FLOAT_FUNCS | frozenset({
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "cbrt", "fabs", "abs", "pow", "tanh",
    "sin", "cos", "tan", "erf", "erfc", "floor", "ceil", "trunc", "round", "rint", "fma", "fmin", "fmax", "copysign",
    "min", "max", "umin", "umax", "llmin", "llmax", "ullmin", "ullmax", "llabs", "__popc", "__popcll", "__clz",
    "__clzll", "__ffs", "__ffsll", "__brev", "__brevll", "__mul24", "__umul24", "__mulhi", "__umulhi", "__mul64hi",
    "__umul64hi", "__sad", "__usad",
    *(f"__float2{t}_{r}" for t in ("int", "uint", "ll", "ull") for r in ("rn", "rz", "ru", "rd")),
    *(f"__double2{t}_{r}" for t in ("int", "uint", "ll", "ull", "float") for r in ("rn", "rz", "ru", "rd")),
    *(f"__{t}2float_{r}" for t in ("int", "uint", "ll", "ull") for r in ("rn", "rz", "ru", "rd")),
    *(f"__{t}2double_rn" for t in ("int", "uint", "ll", "ull")),
    "__float_as_int", "__float_as_uint", "__double_as_longlong", "__longlong_as_double",
    "__float2half", "__float2half_rn", "__half2float", "__float2bfloat16", "__float2bfloat16_rn", "__bfloat16_as_ushort",
    "__ushort_as_bfloat16", "__half_as_ushort", "__ushort_as_half", "__half_as_short", "__short_as_half",
    "__fadd_rn", "__fsub_rn", "__fmul_rn", "__fdiv_rn", "__fmaf_rn", "__fsqrt_rn", "__dadd_rn", "__dmul_rn",
    "__fadd_rz", "__fmul_rz", "__frsqrt_rn", "__fdividef", "__saturatef",
    "ptxf_mod_step", "ptxf_mod_first", "ptxf_mod_next",  # (modstep's helpers: values of values)
})


@lru_cache(maxsize=1)
def parser() -> ts.Parser:
    """The tree-sitter-cuda parser (the one harness/source.py uses)."""
    return ts.Parser(ts.Language(tree_sitter_cuda.language()))


def parse(data: bytes) -> ts.Tree:
    """The syntax tree of ``data`` (UTF-8 CUDA source)."""
    return parser().parse(data)


def kernel_function(root: Node) -> Node | None:
    """The first ``__global__`` function definition under ``root``."""
    for n in walk(root):
        if n.type == "function_definition" and any(c.type == "__global__" for c in n.children):
            return n
    return None


def function_declarator(fn: Node) -> Node | None:
    decl = fn.child_by_field_name("declarator")
    while decl is not None and decl.type != "function_declarator":
        decl = decl.child_by_field_name("declarator")
    return decl


def file_functions(root: Node) -> frozenset[str]:
    """The names a translation unit (or a function) defines or declares as functions (any ``function_declarator``'s
    plain name), as macros (``#define``, with or without parameters) or brings in with ``using`` (``using my::min;``:
    ``min``); a ``using namespace`` of any namespace but ``std`` may bring in any name, so ``min`` and ``max`` too."""
    out = set()
    for n in walk(root):
        if n.type == "using_declaration":
            words = text(n).rstrip(";").split()
            if "namespace" in words:
                if words[-1].lstrip(":") != "std":
                    out |= {"min", "max"}
            else:
                out.add(words[-1].split("::")[-1])
            continue
        if n.type == "function_declarator":
            name = n.child_by_field_name("declarator")
            if is_ident(name):
                out.add(text(name))
            elif name is not None and name.type in ("qualified_identifier", "template_function"):
                out.add(text(name).split("::")[-1].split("<")[0].strip())
        elif n.type in ("preproc_def", "preproc_function_def"):
            name = n.child_by_field_name("name")
            if name is not None:
                out.add(text(name))
    return frozenset(out)


# what makes a function a block-level one: it reads the thread's identity or the launch, or waits for or talks to
# other threads (a __device__ blockReduceSum with its own __shared__ array and barriers)
BLOCK_LEVEL = re.compile(r"\b(threadIdx|blockIdx|blockDim|gridDim|__syncthreads\w*|__syncwarp|__shfl\w*|__ballot_sync|"
                         r"__any_sync|__all_sync|__activemask|__reduce_\w+_sync|__match_\w+_sync|__shared__|this_thread_block|"
                         r"this_grid|cooperative_groups|asm)\b")


def block_level_functions(root: Node) -> frozenset[str]:
    """The names of the functions a translation unit defines whose bodies (or the bodies of functions they call, to
    a fixed point) read ``threadIdx``/``blockIdx``/``blockDim``/``gridDim``, declare ``__shared__`` data, wait at a
    barrier, use a warp collective or inline asm: a call to one is the caller's threads acting together."""
    bodies: dict[str, str] = {}
    for n in walk(root):
        if n.type == "function_definition":
            d = function_declarator(n)
            name = d.child_by_field_name("declarator") if d is not None else None
            if name is not None:
                key = text(name).split("::")[-1].split("<")[0].strip()
                bodies[key] = bodies.get(key, "") + text(n.child_by_field_name("body"))
    out = {k for k, b in bodies.items() if BLOCK_LEVEL.search(b)}
    while True:
        more = {k for k, b in bodies.items() if k not in out and any(re.search(rf"\b{re.escape(f)}\s*(<[^;{{}}]*>)?\s*\(", b) for f in out)}
        if not more:
            return frozenset(out)
        out |= more


def in_lambda(node: Node, stop: Node | None = None) -> bool:
    """``node`` sits inside a lambda (below ``stop``, when given): its ``return`` and names are the lambda's."""
    n = node.parent
    while n is not None and n != stop:
        if n.type == "lambda_expression":
            return True
        n = n.parent
    return False


def is_ident(node: Node | None, name: str | None = None) -> bool:
    return node is not None and node.type == "identifier" and (name is None or text(node) == name)


def is_builtin(node: Node | None, var: str, field: str = "x") -> bool:
    """``node`` is ``var.field``, e.g. ``threadIdx.x`` (parentheses and casts allowed)."""
    node = uncast(node)
    return (
        node is not None and node.type == "field_expression"
        and is_ident(node.child_by_field_name("argument"), var) and text(node.child_by_field_name("field")) == field
    )


def call_name(node: Node | None) -> str | None:
    """The called function's name for ``f(...)``, else None."""
    if node is None or node.type != "call_expression":
        return None
    fn = node.child_by_field_name("function")
    return text(fn) if is_ident(fn) else None


def call_args(node: Node) -> list[Node]:
    args = node.child_by_field_name("arguments")
    return [a for a in args.named_children if a.type != "comment"] if args is not None else []


def statements(compound: Node) -> list[Node]:
    """The statements of a compound statement, comments left out."""
    return [c for c in compound.named_children if c.type != "comment"]


def operands(node: Node | None, op: str, casts: bool = False) -> list[Node]:
    """The operands of a chain of the binary ``op`` (``a || b || c``, ``x * y * z``), parentheses opened (and casts,
    with ``casts``)."""
    node = uncast(node) if casts else unparen(node)
    if node is not None and node.type == "binary_expression" and operator(node) == op:
        return operands(node.child_by_field_name("left"), op, casts) + operands(node.child_by_field_name("right"), op, casts)
    return [node]


def contains_call(node: Node, names) -> bool:
    return any(call_name(n) in names for n in walk(node))


def contains_type(node: Node, types) -> bool:
    return any(n.type in types for n in walk(node))


def identifiers(node: Node) -> set[str]:
    return {text(n) for n in walk(node) if n.type == "identifier"}


def is_number(node: Node | None, value: float | None = None) -> bool:
    node = unparen(node)
    if node is None or node.type != "number_literal":
        return False
    return value is None or literal_value(node) == value


def maybe_written_names(node: Node) -> set[str]:
    """:func:`written_names` and the names a reference, a call that is not a value function or a stream may write
    (:func:`ptxfactory.harness.cexpr.maybe_written_names`)."""
    return cexpr.maybe_written_names(node, lambda call: call_name(call) in VALUE_FUNCS)


def declared_names(node: Node) -> set[str]:
    """Names declared (variables, parameters) under ``node``."""
    out = set()
    for n in walk(node):
        if n.type in ("declaration", "parameter_declaration"):
            for d in n.children_by_field_name("declarator"):
                ident = innermost_identifier(d)
                if ident is not None:
                    out.add(text(ident))
    return out


def innermost_identifier(decl: Node | None) -> Node | None:
    """The declared name inside a (pointer/array/init/reference) declarator."""
    while decl is not None and decl.type != "identifier":
        nxt = decl.child_by_field_name("declarator")
        if nxt is None:
            nxt = next((c for c in decl.named_children if c.type in ("identifier", "pointer_declarator", "array_declarator",
                                                                      "reference_declarator", "init_declarator")), None)
        decl = nxt
    return decl


def type_text(node: Node | None) -> str:
    """The base type of a declaration, whitespace-normalised (``unsigned  int`` -> ``unsigned int``)."""
    return " ".join(text(node).split()) if node is not None else ""


def line_indent(data: bytes, pos: int) -> tuple[bytes, bool]:
    """The indentation of the line holding byte ``pos``, and whether only whitespace precedes ``pos`` on it."""
    start = data.rfind(b"\n", 0, pos) + 1
    prefix = data[start:pos]
    indent = prefix[: len(prefix) - len(prefix.lstrip())]
    return indent, prefix.strip() == b""


def apply_edits(data: bytes, edits: list[tuple[int, int, bytes]]) -> bytes:
    """``data`` with each ``(start, end, replacement)`` applied; edits must not overlap. Raises ``ValueError`` if they do."""
    out, pos = [], 0
    for start, end, rep in sorted(edits, key=lambda e: (e[0], e[1])):
        if start < pos:
            raise ValueError(f"overlapping edits at byte {start}")
        out += [data[pos:start], rep]
        pos = end
    out.append(data[pos:])
    return b"".join(out)


def render(node: Node, data: bytes, replace: Callable[[Node], bytes | None]) -> bytes:
    """The text of ``node`` with every node for which ``replace`` returns bytes replaced by them (outermost first).

    ``replace`` may call :func:`render` on sub-nodes to rewrite nested matches (``x[y[i]]``).
    """
    rep = replace(node)
    if rep is not None:
        return rep
    out, pos = [], node.start_byte
    for c in node.children:
        out += [data[pos:c.start_byte], render(c, data, replace)]
        pos = c.end_byte
    out.append(data[pos:node.end_byte])
    return b"".join(out)


class Types:
    """Declared types of a kernel's names: scalars, and the element type of pointers and arrays.

    A name declared twice with different types is left out (unknown), so inference stays conservative.
    """

    def __init__(self, fn: Node, fixed: dict[str, str] | None = None):
        """``fixed``: template parameters the spec fixes to one type (``T`` -> ``float``): a local ``T m`` is a float."""
        self.scalar: dict[str, str | None] = {}
        self.element: dict[str, str | None] = {}
        fixed = fixed or {}
        for n in walk(fn):
            if n.type not in ("declaration", "parameter_declaration"):
                continue
            base = type_text(n.child_by_field_name("type"))
            base = fixed.get(base, base)
            for d in n.children_by_field_name("declarator"):
                ident = innermost_identifier(d)
                if ident is None:
                    continue
                name = text(ident)
                inner = d.child_by_field_name("declarator") if d.type == "init_declarator" else d
                table = self.element if inner is not None and inner.type in ("pointer_declarator", "array_declarator") else self.scalar
                other = self.scalar if table is self.element else self.element
                if name in other or (name in table and table[name] != base):
                    table[name] = None
                    other[name] = None
                else:
                    table[name] = base

    def of(self, node: Node | None) -> str | None:
        """``"float"``, ``"double"``, ``"int"`` (any integer type) or None (unknown) for an expression."""
        node = unparen(node)
        if node is None:
            return None
        t = node.type
        if t == "number_literal":
            s = text(node).lower()
            if s.startswith("0x"):
                return "int"
            if "." in s or "e" in s:
                return "float" if s.endswith("f") else "double"
            return "int"
        if t == "identifier":
            return _kind(self.scalar.get(text(node)))
        if t == "cast_expression":
            return _kind(type_text(node.child_by_field_name("type")))
        if t == "call_expression":
            return "float" if call_name(node) in FLOAT_FUNCS else None
        if t == "subscript_expression":
            arg = node.child_by_field_name("argument")
            return _kind(self.element.get(text(arg))) if is_ident(arg) else None
        if t == "field_expression" and any(is_builtin(node, v, f) for v in ("threadIdx", "blockIdx", "blockDim", "gridDim") for f in "xyz"):
            return "int"
        if t == "unary_expression" and operator(node) in ("-", "+"):
            return self.of(node.child_by_field_name("argument"))
        if t == "binary_expression" and operator(node) in ("+", "-", "*", "/"):
            a, b = self.of(node.child_by_field_name("left")), self.of(node.child_by_field_name("right"))
            if a is None or b is None:
                return None
            for k in ("double", "float"):
                if k in (a, b):
                    return k
            return "int"
        if t == "conditional_expression":
            a, b = self.of(node.child_by_field_name("consequence")), self.of(node.child_by_field_name("alternative"))
            return a if a == b else None
        return None


def _kind(ctype: str | None) -> str | None:
    if ctype is None:
        return None
    ctype = " ".join(w for w in ctype.split() if w not in ("const", "volatile"))
    if ctype in ("float", "double"):
        return ctype
    if ctype in INT_TYPES:
        return "int"
    return None


def subscript_index(node: Node) -> Node | None:
    """The index expression of a ``subscript_expression`` ``p[i]`` (None for ``p[i, k]`` or an empty subscript)."""
    idx = node.child_by_field_name("indices")
    items = [c for c in idx.named_children if c.type != "comment"] if idx is not None else []
    return items[0] if len(items) == 1 else None


def declaration_counts(fn: Node) -> dict[str, int]:
    """How many times each name is declared in the function ``fn`` (its parameters included)."""
    out: dict[str, int] = {}
    for n in walk(fn):
        if n.type in ("declaration", "parameter_declaration"):
            for d in n.children_by_field_name("declarator"):
                ident = innermost_identifier(d)
                if ident is not None:
                    out[text(ident)] = out.get(text(ident), 0) + 1
    return out


def literal_trips(loop: Node, constants: dict[str, int] | None = None) -> int | None:
    """The trip count of ``for (T j = a; j < b; j++)`` (``<=``, ``++j``, ``j += 1`` too) when ``a`` and ``b`` are integer
    literals, negative ones included (a 3 x 3 window's ``dy = -1; dy <= 1``; a cast of one from 0 to 127 too:
    ``specialise``'s ``((int)32)``) or names of ``constants`` (the file's ``#define K 7``), else None."""
    init, cond, upd = (loop.child_by_field_name(f) for f in ("initializer", "condition", "update"))
    cond = unparen(cond)
    if init is None or cond is None or upd is None or cond.type != "binary_expression" or operator(cond) not in ("<", "<="):
        return None
    decl = next((c for c in walk(init) if c.type == "init_declarator"), None)
    start = decl.child_by_field_name("value") if decl is not None else (
        init.child_by_field_name("right") if init.type == "assignment_expression" else None)
    j = text(unparen(cond.child_by_field_name("left")))
    if start is None or text(upd).replace(" ", "") not in (f"{j}++", f"++{j}", f"{j}+=1"):
        return None

    def value(node: Node | None) -> int | None:
        node = unparen(node)
        if node is None:
            return None
        if node.type == "identifier":
            return (constants or {}).get(text(node))
        if node.type == "unary_expression" and operator(node) in ("-", "+"):  # a window's -1 .. 1 (dy = -1)
            v = value(node.child_by_field_name("argument"))
            return None if v is None else (-v if operator(node) == "-" else v)
        if node.type == "cast_expression":  # (any integer type holds 0..127 as it is)
            v = literal_value(inner) if (inner := uncast(node)).type == "number_literal" else None
            return v if isinstance(v, int) and 0 <= v <= 127 else None
        v = literal_value(node) if node.type == "number_literal" else None
        return v if isinstance(v, int) else None

    a, b = value(start), value(cond.child_by_field_name("right"))
    if a is None or b is None:
        return None
    return max(0, b - a + (operator(cond) == "<="))


# calls a pass may not move, repeat or run fewer times: barriers, fences, atomics, warp collectives (promote, hoist)
UNSAFE_CALL = re.compile(r"^(__syncthreads\w*|__syncwarp|__threadfence\w*|atomic\w+|__shfl\w*|__ballot\w*|__any\w*|"
                         r"__all\w*|__reduce\w*|__match\w*|cooperative_groups::\w+|__nanosleep)$")


def pragma_before(loop: Node) -> Node | None:
    """The ``#pragma`` line right above ``loop`` (``#pragma unroll``), or None."""
    prev = loop.prev_sibling
    if prev is not None and prev.type in ("preproc_call", "preproc_pragma") and text(prev).lstrip().startswith("#pragma"):
        return prev
    return None


def compact(node: Node) -> str:
    """``node``'s text without whitespace: two spellings of one expression compare equal (``x[i * 16 + j]``)."""
    return re.sub(r"\s+", "", text(node))


def rewrite_rounds(data: bytes, parse, find, rounds: int = 8) -> bytes:
    """``data`` (a kernel definition's text) with ``find``'s edits applied one set a round, re-parsed each time, until
    it finds none or after ``rounds``: ``parse(data)`` gives the kernel's body (None: none), ``find(data, body)`` a
    list of byte edits (:func:`apply_edits`) or None. A body with ``goto`` or labels is left as written (the
    canonical rewrites of ``perfect_nest``, ``walking`` and ``while_for`` reason about straight-line control)."""
    for _ in range(rounds):
        body = parse(data)
        if body is None or contains_type(body, ("goto_statement", "labeled_statement")):
            return data
        edits = find(data, body)
        if not edits:
            return data
        data = apply_edits(data, edits)
    return data
