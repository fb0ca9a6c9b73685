"""The "rowreduce" family: row reductions ``y[r] = sum_k A[r, k] * v[k]`` (GEMV), or ``sum_k A[r, k]`` without v.

It applies to kernels whose spec reads one 2-D input ``A[R, K]`` (f32, bf16 or f16), optionally one
1-D input ``v[K]`` (f32, bf16 or f16), writes one 1-D output ``y[R]`` (f32 or A's dtype) and takes
exactly two integer scalars whose values are ``R`` and ``K``, with ``launch.policy = "free"``, and whose
kernel's store into ``y`` shows the row's sum (the accumulator, possibly converted) or its mean (the
accumulator divided by ``K``: the candidates then scale the sum by ``1.0f / K``); any other stored value
gets no candidates, and ``refusals`` says why (:func:`store_evidence`).
Each candidate is the CUDA template ``rowreduce.cu`` instantiated with the user's kernel name,
parameter names, types and order, so its ``kernel_text`` drops into their file in place of the
original kernel. Sums are accumulated in fp32.

Kernel design (see ``rowreduce.cu``): TPR threads per row (a warp, or several warps combined
through shared memory), ``block / TPR`` rows per block; ``vec``-byte vector loads of A with ``unroll``
independent loads in flight per thread and a load ``hint`` ("ldg": read-only path, "stream":
evict-first); a scalar head and tail per row, so rows that do not start on a vector boundary (K
odd) keep their vector body; v read through the read-only path, assembled from two aligned vector
loads when v + head is not aligned like A's vector. The ``tpr`` knob is the tiering rule: "warp"
(32 threads per row whatever K is) or "auto" (the fewest power-of-two threads per row, 32 to
``block``, for which a row takes at most ``SWEEPS`` rounds of ``unroll`` vectors per thread), so
short rows get a warp each and long rows a block each. With "auto" the rows per block shrink as the
threads per row grow, so the grid is the piecewise expression ``cdiv(R, rows_per_block(K))`` (only
``min``/``max``/``cdiv``, as protocol.expr allows).

Registers: the kernel is declared ``__launch_bounds__(block, max(1, 65536 // (block * 128)))``, which
lets ptxas use up to 128 registers a thread. Left to itself (no second argument, or a 64-register
cap), ptxas held the unroll-8 GEMV kernels to 40-64 registers and spilled 4-60 bytes; with the
128 cap it takes 64 (unroll 4) or 96 (unroll 8) registers, no spills, and all of a batch's loads in flight
(16-32 warps per SM x 4-8 x 16 bytes: 64 KB in flight per SM, about twice the bandwidth-delay
product of an H200 SM).
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from pathlib import Path

from ptxfactory.protocol import Candidate, KernelSpec

from ..base import GenContext, NoFit, family_candidate, family_candidates, fit_check, size_args
from .cuda_text import load_template, word_to_floats
from .transform import syntax as sx
from .transform.syntax import Node

_TEMPLATE = Path(__file__).with_name("rowreduce.cu")
_FLOATS = ("bf16", "f16", "f32")
_CTYPE = {"bf16": "__nv_bfloat16", "f16": "__half", "f32": "float"}
_ITEMSIZE = {"bf16": 2, "f16": 2, "f32": 4}
_VEC_TYPE = {4: "unsigned", 8: "uint2", 16: "uint4"}

# "auto" tiering: a row takes at most SWEEPS rounds of `unroll` vectors per thread before the next
# wider tier (twice the threads per row) is used. 4 gives, for f32 at unroll 4: a warp per row up to
# K = 2048, 64 threads to 4096, 128 to 8192, 256 to 16384 (the bench's 4096 x 16384 GEMV: one
# 256-thread block per row: 4096 blocks, many waves on any GPU; nothing here depends on the SM count).
SWEEPS = 4

# The tuning space, as a product in this order (smallest first); see tuning_space().
BLOCKS = (128, 256, 512)
VECS = (16,)
TPRS = ("auto", "warp")
UNROLLS = (4, 8)
HINTS = ("ldg", "stream")


@dataclass(frozen=True)
class RowReduceMatch:
    """How a spec maps onto the row-reduction pattern: argument names, size symbols and dtypes."""

    a: str
    v: str | None
    y: str
    r_arg: str
    k_arg: str
    r_sym: str
    k_sym: str
    a_dtype: str
    v_dtype: str | None
    y_dtype: str
    k_dtype: str  # dtype of the K scalar (index type)


@dataclass(frozen=True)
class RowReduceConfig:
    """One point of the tuning space.

    ``block`` threads per block; ``vec`` bytes per vector load of A (4, 8 or 16); ``tpr`` the tiering
    rule for threads per row ("warp" or "auto", see the module docstring); ``unroll`` vector loads
    of A in flight per thread; ``hint`` "ldg" (read-only path) or "stream" (evict-first) for A.
    """

    block: int
    vec: int = 16
    tpr: str = "auto"
    unroll: int = 4
    hint: str = "ldg"

    def tiers(self, ve: int) -> list[tuple[int, int, int | None]]:
        """``(threads_per_row, rows_per_block, max_K)`` per tier, shortest rows first; the last has no limit (None).

        ``ve`` is the number of A elements per vector (``vec / itemsize``).
        """
        if self.tpr == "warp":
            return [(32, self.block // 32, None)]
        out, t = [], 32
        while t < self.block:
            out.append((t, self.block // t, t * self.unroll * ve * SWEEPS))
            t *= 2
        out.append((self.block, 1, None))
        return out

    def params(self) -> dict:
        return {"block": self.block, "vec": self.vec, "tpr": self.tpr, "unroll": self.unroll, "hint": self.hint}


def rows_per_block_expr(tiers: list[tuple[int, int, int | None]], k_sym: str) -> str:
    """Rows per block as an expression of the row length ``k_sym`` (integer, >= 1), matching the kernel's dispatch."""
    expr = str(tiers[-1][1])
    for (_, rpb, cap), (_, nxt, _) in zip(tiers, tiers[1:]):
        if rpb != nxt:  # + (rpb - nxt) while k_sym <= cap
            expr += f" + {rpb - nxt} * min(1, max(0, {cap + 1} - {k_sym}))"
    return expr


def grid_expr(tiers: list[tuple[int, int, int | None]], r_sym: str, k_sym: str) -> str:
    """``cdiv(R, rows_per_block(K))``, simplified when rows per block is constant 1."""
    rpb = rows_per_block_expr(tiers, k_sym)
    return r_sym if rpb == "1" else f"cdiv({r_sym}, {rpb})"


@fit_check
def match_spec(spec: KernelSpec) -> RowReduceMatch | None:
    """The row-reduction mapping of ``spec``, or None when the spec does not have the pattern (or its launch is fixed)."""
    syms = set(spec.symbols)
    bufs = [a for a in spec.args if a.is_buffer]
    scalars = [a for a in spec.args if not a.is_buffer]
    if any(a.role == "inout" for a in bufs):
        raise NoFit("an inout buffer: " + ", ".join(a.name for a in bufs if a.role == "inout"))
    ins = [a for a in bufs if a.role == "in"]
    outs = [a for a in bufs if a.role == "out"]
    mats = [a for a in ins if _dims(a.shape, syms) is not None and len(a.shape) == 2]
    if len(mats) != 1 or len(outs) != 1 or len(ins) > 2:
        raise NoFit(f"inputs: {len(ins)} ({len(mats)} two-dimensional), outputs: {len(outs)}; it takes a[R, K], "
                    "optionally v[K], and one output y[R]")
    a, y = mats[0], outs[0]
    r_sym, k_sym = _dims(a.shape, syms)
    if r_sym == k_sym or a.dtype.value not in _FLOATS:
        raise NoFit(f"{a.name} is square in its symbols" if r_sym == k_sym else f"{a.name} is {a.dtype.value}, not a float")
    if _dims(y.shape, syms) != (r_sym,) or y.dtype.value not in {"f32", a.dtype.value}:
        raise NoFit(f"the output {y.name} is not [{r_sym}] of f32 or {a.name}'s dtype")
    vs = [b for b in ins if b is not a]
    if vs and (_dims(vs[0].shape, syms) != (k_sym,) or vs[0].dtype.value not in _FLOATS):
        raise NoFit(f"the second input {vs[0].name} is not a float [{k_sym}] vector")
    v = vs[0] if vs else None
    sizes = size_args(scalars, r_sym, k_sym)
    if len(scalars) != 2 or sizes is None:
        raise NoFit(f"scalars other than two integers equal to {r_sym} and {k_sym}")
    r_arg, k_arg = sizes
    return RowReduceMatch(
        a=a.name, v=v.name if v else None, y=y.name, r_arg=r_arg.name, k_arg=k_arg.name, r_sym=r_sym, k_sym=k_sym,
        a_dtype=a.dtype.value, v_dtype=v.dtype.value if v else None, y_dtype=y.dtype.value, k_dtype=k_arg.dtype.value,
    )


def _dims(shape, syms: set[str]) -> tuple[str, ...] | None:
    """The shape as a tuple of bare size symbols, or None when a dimension is a number or an expression."""
    if not shape or not all(isinstance(d, str) and d.strip() in syms for d in shape):
        return None
    return tuple(d.strip() for d in shape)


def tuning_space() -> list[RowReduceConfig]:
    """The configurations in natural product order: block x vec x tpr x unroll x hint (24 points)."""
    return [RowReduceConfig(b, vec, tpr, u, h) for b, vec, tpr, u, h in itertools.product(BLOCKS, VECS, TPRS, UNROLLS, HINTS)]


# ---------------------------------------------------------------- evidence: what the kernel stores per row
#
# The spec says only that a matrix goes in and one value per row comes out; the skeleton computes the row's
# sum (or dot product with v). So the family reads the kernel's store into the output (tree-sitter, as the
# transform passes do) and proposes only when that store shows what the skeleton computes: the accumulator
# itself (cast or converted to the output's type), or the accumulator divided by the row length (a mean,
# proposed as the skeleton's store scaled by 1 / K). Anything else (sqrtf(s), s * alpha, out[r] += s, an
# atomic) gets no candidates, and ``refusals`` says why.

# one-argument calls that only convert the stored float to the output's type
_CONVERSIONS = frozenset({
    "__float2half", "__float2half_rn", "__float2bfloat16", "__float2bfloat16_rn", "__half", "__nv_bfloat16", "float",
    "half", "__float2half_rz", "__float2bfloat16_rz",
})
_ALIAS_DEPTH = 4  # how many `float m = ...;` definitions a stored value is followed through


@dataclass(frozen=True)
class StoreEvidence:
    """What the kernel stores into the output: ``kind`` "sum" (the accumulator), "mean" (divided by the row
    length) or None (something else, or no store found), with ``reason`` (why not) when None."""

    kind: str | None
    reason: str = ""


def _strip(node: Node | None) -> Node | None:
    """``node`` without parentheses, casts (C-style, ``static_cast``) and one-argument conversions to the output type."""
    while True:
        node = sx.uncast(node)
        if node is None or node.type != "call_expression":
            return node
        fn, args = node.child_by_field_name("function"), sx.call_args(node)
        name = sx.text(fn.child_by_field_name("name")) if fn is not None and fn.type == "template_function" else sx.call_name(node)
        if len(args) != 1 or name not in _CONVERSIONS | {"static_cast"}:
            return node
        node = args[0]


class _Kernel:
    """The writes of one kernel definition, by the name they assign."""

    def __init__(self, fn: Node):
        self.fn = fn
        self.writes: dict[str, list[tuple[str, Node | None]]] = {}  # name -> [(operator, value)]; "init" for a declaration
        for n in sx.walk(fn):
            if n.type == "init_declarator":
                ident = sx.innermost_identifier(n.child_by_field_name("declarator"))
                if ident is not None:
                    self.writes.setdefault(sx.text(ident), []).append(("init", n.child_by_field_name("value")))
            elif n.type == "assignment_expression":
                left = sx.unparen(n.child_by_field_name("left"))
                if sx.is_ident(left):
                    self.writes.setdefault(sx.text(left), []).append((sx.operator(n), n.child_by_field_name("right")))
            elif n.type == "update_expression":
                arg = sx.unparen(n.child_by_field_name("argument"))
                if sx.is_ident(arg):
                    self.writes.setdefault(sx.text(arg), []).append(("++", None))

    def resolve(self, node: Node | None, depth: int = 0) -> Node | None:
        """``node`` stripped, and followed through a local defined once (``float m = s / N;``) to its definition."""
        node = _strip(node)
        while sx.is_ident(node) and depth < _ALIAS_DEPTH:
            ws = self.writes.get(sx.text(node), [])
            if len(ws) != 1 or ws[0][0] not in ("init", "=") or ws[0][1] is None:
                break
            node, depth = _strip(ws[0][1]), depth + 1
        return node

    def is_length(self, node: Node | None, k: str) -> bool:
        """``node`` is the row length ``k`` (cast, converted, or through a local defined once as it)."""
        return sx.is_ident(self.resolve(node), k)

    def is_inverse_length(self, node: Node | None, k: str) -> bool:
        """``node`` is ``1 / k`` (``1.0f / N``, ``1.f / (float)N``, ``__frcp_rn(N)``, through a local defined once)."""
        node = self.resolve(node)
        if node is None:
            return False
        if node.type == "binary_expression" and sx.operator(node) == "/":
            return sx.is_number(_strip(node.child_by_field_name("left")), 1) and self.is_length(node.child_by_field_name("right"), k)
        return sx.call_name(node) in ("__frcp_rn", "__frcp_rz", "__frcp_rd", "__frcp_ru") and \
            len(sx.call_args(node)) == 1 and self.is_length(sx.call_args(node)[0], k)

    def accumulator(self, name: str, k: str) -> str | None:
        """"sum" when the local ``name`` is a plain accumulator (written by ``+=`` or ``name = name + ...``),
        "mean" when it is then divided in place by the row length (``s /= N``), None when it is rescaled or
        transformed otherwise (``s *= alpha``, ``s = sqrtf(s)``)."""
        kind, accumulated = "sum", False
        for op, value in self.writes.get(name, []):
            if op == "init":
                continue
            accumulated = True
            if op in ("+=", "=") and _transforms(value):
                return None  # s += w[j] * log1pf(expf(x[j])): a sum of another function of the row
            if op == "+=":
                continue
            if op == "/=" and kind == "sum" and self.is_length(value, k):
                kind = "mean"
                continue
            if op == "=" and value is not None:
                v = sx.unparen(value)
                if name not in sx.identifiers(v):  # a fresh value (sum = partial[0]): still the row's value
                    continue
                if v.type == "binary_expression" and sx.operator(v) == "+" and any(
                        sx.is_ident(sx.unparen(v.child_by_field_name(f)), name) for f in ("left", "right")):
                    continue
                if sx.call_name(v) == "fmaf" and len(sx.call_args(v)) == 3 and sx.is_ident(sx.unparen(sx.call_args(v)[2]), name):
                    continue
            return None
        return kind if accumulated else None

    def classify(self, node: Node | None, k: str, depth: int = 0) -> str | None:
        """"sum", "mean" or None for a stored value (see :class:`StoreEvidence`)."""
        node = _strip(node)
        if node is None or depth > _ALIAS_DEPTH:
            return None
        if node.type == "subscript_expression":  # a shared array the block reduced into (partial[0])
            return "sum"
        if sx.is_ident(node):
            ws = self.writes.get(sx.text(node), [])
            if len(ws) == 1 and ws[0][0] in ("init", "=") and ws[0][1] is not None and not sx.is_number(ws[0][1]):
                return self.classify(ws[0][1], k, depth + 1)  # a local defined once: what it is defined as
            return self.accumulator(sx.text(node), k)
        sides = [node.child_by_field_name(f) for f in ("left", "right")] if node.type == "binary_expression" else []
        if sides and sx.operator(node) == "/":
            return "mean" if self.classify(sides[0], k, depth + 1) == "sum" and self.is_length(sides[1], k) else None
        if sides and sx.operator(node) == "*":
            for acc, scale in (sides, sides[::-1]):
                if self.classify(acc, k, depth + 1) == "sum" and self.is_inverse_length(scale, k):
                    return "mean"
            return None
        if sx.call_name(node) in ("__fdividef", "__fdiv_rn", "__fdiv_rz", "__fdiv_rd", "__fdiv_ru") and len(sx.call_args(node)) == 2:
            a, b = sx.call_args(node)
            return "mean" if self.classify(a, k, depth + 1) == "sum" and self.is_length(b, k) else None
        return None


CONVERSIONS = frozenset({"__bfloat162float", "__half2float", "fmaf", "__fmaf_rn", "__fmul_rn", "__fadd_rn"})


def _transforms(value: Node | None) -> bool:
    """Whether an accumulated ``value`` calls a math function (``expf``, ``log1pf``, ``fabsf``: :data:`sx.VALUE_FUNCS`
    but conversions and ``fmaf``): the family sums the elements (times ``v``) as they are, not a function of them.
    Loads, warp shuffles and the file's macros are not math."""
    return value is not None and any(n.type == "call_expression" and sx.call_name(n) in sx.VALUE_FUNCS - CONVERSIONS
                                     for n in sx.walk(value))


def store_evidence(kernel_text: str, y: str, k: str) -> StoreEvidence:
    """What the kernel ``kernel_text`` stores into the output ``y`` (row length ``k``): every store must be a plain
    ``y[...] = value`` whose value is the row's accumulator ("sum") or it divided by ``k`` ("mean"), all the same."""
    root = sx.parse(kernel_text.encode()).root_node
    fn = sx.kernel_function(root) or next((n for n in sx.walk(root) if n.type == "function_definition"), None)
    if fn is None:
        return StoreEvidence(None, "no kernel definition found to read its store")
    kern, kinds = _Kernel(fn), []
    for n in sx.walk(fn):
        target = None
        if n.type == "assignment_expression":
            target = sx.unparen(n.child_by_field_name("left"))
        elif n.type == "call_expression" and sx.call_name(n) and sx.call_name(n).startswith("atomic"):
            if any(y in sx.identifiers(a) for a in sx.call_args(n)[:1]):
                return StoreEvidence(None, f"line {n.start_point[0] + 1}: {y} is written by {sx.call_name(n)}, not stored once per row")
            continue
        if target is None:
            continue
        if target.type == "subscript_expression":
            arr = sx.uncast(target.child_by_field_name("argument"))
        elif target.type == "pointer_expression" and sx.operator(target) == "*":
            arr = target.child_by_field_name("argument")
            if y in sx.identifiers(arr):
                return StoreEvidence(None, f"line {n.start_point[0] + 1}: {y} is stored through pointer arithmetic")
            continue
        else:
            continue
        if not sx.is_ident(arr, y):
            continue
        stmt = sx.text(n)
        if sx.operator(n) != "=":
            return StoreEvidence(None, f"line {n.start_point[0] + 1}: `{stmt}` updates the output in place, not the row sum the family computes")
        kind = kern.classify(n.child_by_field_name("right"), k)
        if kind is None:
            return StoreEvidence(None, f"line {n.start_point[0] + 1}: `{stmt}` stores something other than the row's sum "
                                       f"(or sum / {k}), which is all the family computes")
        kinds.append(kind)
    if not kinds:
        return StoreEvidence(None, f"no store `{y}[...] = ...` found: nothing shows the kernel stores the row's sum")
    if len(set(kinds)) > 1:
        return StoreEvidence(None, f"the stores into {y} disagree (a sum in one, a mean in another)")
    return StoreEvidence(kinds[0])


class RowReduceFamily:
    """Expert row-reduction skeleton (row sums, GEMV, row means): 24 instances in the product order of ``tuning_space``.

    Proposes only when the kernel's store into the output shows a row sum or a row mean (:func:`store_evidence`)."""

    name = "rowreduce"

    def _evidence(self, ctx: GenContext) -> tuple[RowReduceMatch | None, StoreEvidence | None]:
        m = match_spec(ctx.spec)
        return (m, store_evidence(ctx.kernel.text, m.y, m.k_arg)) if m is not None else (None, None)

    def propose(self, ctx: GenContext) -> list[Candidate]:
        m, ev = self._evidence(ctx)
        fits = m is not None and ev.kind is not None
        return family_candidates(ctx, fits, tuning_space() if fits else (), lambda cfg: self.instantiate(ctx, m, cfg, ev.kind))

    def why_not(self, ctx: GenContext) -> str | None:
        """Why the skeleton does not fit ``ctx``'s spec or source (None where it does; what no family takes, a template
        or a signature unlike the spec, is :func:`~ptxfactory.search.base.kernel_refusal`'s)."""
        m = match_spec(ctx.spec)
        if m is None:
            return match_spec.why(ctx.spec)
        refused = self.refusals(ctx)
        return refused[0][1] if refused else None

    def refusals(self, ctx: GenContext) -> list[tuple[str, str]]:
        """``[("rowreduce", why)]`` when the spec has the row-reduction pattern but the kernel's store shows another
        function (the report lists it with the passes not tried); [] otherwise."""
        try:
            m, ev = self._evidence(ctx)
        except Exception:  # noqa: BLE001 - a report line is not worth failing a job over
            return []
        if m is None or ev.kind is not None or ctx.kernel.text.lstrip().startswith("template"):
            return []
        line = ctx.source.encode()[: ctx.kernel.start_byte].count(b"\n")
        reason = re.sub(r"^line (\d+)", lambda g: f"line {int(g.group(1)) + line}", ev.reason)
        return [(self.name, f"{reason}; the row-sum candidates would compute another function")]

    def instantiate(self, ctx: GenContext, m: RowReduceMatch, cfg: RowReduceConfig, kind: str = "sum") -> Candidate:
        """The candidate for one configuration (the spec must match: ``m = match_spec(ctx.spec)``); ``kind`` "mean"
        scales each row's result by ``1 / K``."""
        text = render_kernel(ctx, m, cfg, kind)
        tiers = cfg.tiers(cfg.vec // _ITEMSIZE[m.a_dtype])
        what = ("gemv" if m.v else "sum") if kind == "sum" else ("gemv-mean" if m.v else "mean")
        desc = (
            f"rowreduce {what} block={cfg.block} vec{cfg.vec} tpr={cfg.tpr}"
            f"({tiers[0][0]}..{tiers[-1][0]}) unroll={cfg.unroll} {cfg.hint}"
        )
        return family_candidate(ctx, self.name, text, grid_expr(tiers, m.r_sym, m.k_sym), cfg.block, desc, cfg.params())



def render_kernel(ctx: GenContext, m: RowReduceMatch, cfg: RowReduceConfig, kind: str = "sum") -> str:
    """The kernel text (helpers + ``__global__`` definition) for one configuration, in the user's signature;
    ``kind`` "mean" stores each row's result times ``1.0f / K``.

    Raises ``ValueError`` for a vector width that is not 4, 8 or 16 bytes.
    """
    if cfg.vec not in _VEC_TYPE:
        raise ValueError(f"vec must be 4, 8 or 16 bytes, not {cfg.vec}")
    ta, ty = _CTYPE[m.a_dtype], _CTYPE[m.y_dtype]
    tv = _CTYPE[m.v_dtype or "f32"]
    idx = "int" if m.k_dtype == "i32" else "long long"
    vb = cfg.vec
    ve = vb // _ITEMSIZE[m.a_dtype]
    params = []
    for p in ctx.kernel.params:
        const = "const " if p.is_const else ""
        params.append(f"{const}{p.type}* __restrict__ {p.name}" if p.is_pointer else f"{const}{p.type} {p.name}")
    v_arg = m.v if m.v else "static_cast<const float*>(nullptr)"
    args = f"{m.a}, {v_arg}, {m.y}, (long long){m.r_arg}, ({idx}){m.k_arg}, ptxf_red"
    tiers = cfg.tiers(ve)
    lines = []
    for i, (tpr, _, cap) in enumerate(tiers):
        call = f"ptxf_rowreduce<{tpr}, {cfg.unroll}>({args});"
        lines.append("    " + ("else " if i else "") + (call if cap is None else f"if ({m.k_arg} <= {cap}) {call}"))
    if m.v:
        head = "ptxf_a2f(a[t]) * ptxf_v2f(v[t])"
        tail = "ptxf_a2f(a[tail + t]) * ptxf_v2f(v[tail + t])"
        dot = (f"            float g[{ve}];\n            ptxf_load_v<D>(vh, j, g);\n#pragma unroll\n"
               f"            for (int k = 0; k < {ve}; ++k) s = fmaf(f[k], g[k], s);")
        cases = "\n".join(
            f"        {'default' if d == ve - 1 else f'case {d}'}: acc = ptxf_row_body<TPR, U, {d}>(a + head, vh, nv, t); break;"
            for d in range(ve)
        )
        align_v = (
            f"        // v + head lies D elements past a {ve}-element boundary of v: each v vector then takes two aligned loads.\n"
            f"        // A v that starts off its own boundary (D > head) moves one more vector into the scalar head,\n"
            f"        // so that the first aligned load of v stays inside v.\n"
            f"        const int D = (int)((reinterpret_cast<unsigned long long>(v) / sizeof({tv}) + (unsigned long long)head) % {ve}u);\n"
            f"        if (({idx})D > head) head += {ve};"
        )
        dispatch_d = (
            f"        const {tv}* __restrict__ vh = v + head;\n"
            f"        if (D != 0 && nv > 0) nv -= 1;  // the last vector's second load of v would pass v's end: scalar tail\n"
            f"        switch (D) {{\n{cases}\n        }}"
        )
    else:
        head = "ptxf_a2f(a[t])"
        tail = "ptxf_a2f(a[tail + t])"
        dot = f"#pragma unroll\n            for (int k = 0; k < {ve}; ++k) s += f[k];"
        dispatch_d = "        acc = ptxf_row_body<TPR, U, 0>(a + head, v, nv, t);"
        align_v = ""
    linkage = 'extern "C" ' if re.match(r'extern\s+"C"\s*(?!\{)', ctx.kernel.text.lstrip()) else ""
    body = load_template(_TEMPLATE).substitute(
        CONVERT=_convert(m, cfg, ta, tv, ty, idx, ve),
        TA=ta, TV=tv, TY=ty, IDX=idx, VB=vb, VE=ve, BLOCK=cfg.block,
        BODY_DOT=dot, ALIGN_V=align_v, DISPATCH_D=dispatch_d, HEAD_TERM=head, TAIL_TERM=tail,
        SCALE=" * (1.0f / (float)K)" if kind == "mean" else "",
        R=m.r_arg, MINB=max(1, 65536 // (cfg.block * 128)), LINKAGE=linkage, KERNEL=ctx.kernel.name, PARAMS=", ".join(params), DISPATCH="\n".join(lines),
    )
    # The helpers are C++ templates: give them C++ linkage even when the kernel sits in an extern "C" block.
    head_text, sep, kernel = body.rpartition(f"{linkage}__global__ void __launch_bounds__")
    launch = f"// Launch: grid ({grid_expr(tiers, m.r_sym, m.k_sym)},), block ({cfg.block},), no dynamic shared memory.\n"
    return f'extern "C++" {{\n{head_text.rstrip()}\n}}  // extern "C++"\n\n{launch}{sep}{kernel}'



def _half_to_float(dt: str, h: str) -> str:
    """C expression for the float held by the 16-bit pattern ``h`` of dtype ``dt`` (bf16 or f16)."""
    return f"__uint_as_float((unsigned){h} << 16)" if dt == "bf16" else f"__half2float(__ushort_as_half({h}))"


def _load_words(nbytes: int, ptr: str, load: str, name: str) -> tuple[str, list[str]]:
    """Statements loading ``nbytes`` (4, 8, 16 or 32) aligned bytes at ``ptr`` with ``load``, and the 32-bit word names."""
    if nbytes == 4:
        return f"const unsigned {name}0 = {load}(reinterpret_cast<const unsigned*>({ptr}));", [f"{name}0"]
    if nbytes == 8:
        return f"const uint2 {name} = {load}(reinterpret_cast<const uint2*>({ptr}));", [f"{name}.x", f"{name}.y"]
    if nbytes == 16:
        return f"const uint4 {name} = {load}(reinterpret_cast<const uint4*>({ptr}));", [f"{name}.{c}" for c in "xyzw"]
    stmt = (f"const uint4 {name}a = {load}(reinterpret_cast<const uint4*>({ptr})), "
            f"{name}b = {load}(reinterpret_cast<const uint4*>({ptr}) + 1);")
    return stmt, [f"{name}a.{c}" for c in "xyzw"] + [f"{name}b.{c}" for c in "xyzw"]


def _convert(m: RowReduceMatch, cfg: RowReduceConfig, ta: str, tv: str, ty: str, idx: str, ve: int) -> str:
    """Dtype-specific helpers: scalar conversions, A's vector type, load and unpack, v's aligned chunk load."""
    x2f = {"bf16": "__bfloat162float(x)", "f16": "__half2float(x)", "f32": "x"}
    f2y = {"bf16": "__float2bfloat16(f)", "f16": "__float2half(f)", "f32": "f"}[m.y_dtype]
    load_a = {"ldg": "__ldg", "stream": "__ldcs", "plain": "*"}[cfg.hint]
    avec = _VEC_TYPE[cfg.vec]
    if cfg.vec == 4:
        words = ["q"]
    else:
        words = [f"q.{c}" for c in "xyzw"[: cfg.vec // 4]]
    epw = 4 // _ITEMSIZE[m.a_dtype]
    unpack = "\n".join(
        f"    f[{w * epw + k}] = {e};" for w, word in enumerate(words) for k, e in enumerate(word_to_floats(m.a_dtype, word))
    )
    out = f"""
static __device__ __forceinline__ float ptxf_a2f({ta} x) {{ return {x2f[m.a_dtype]}; }}
static __device__ __forceinline__ {ty} ptxf_f2y(float f) {{ return {f2y}; }}
typedef {avec} ptxf_avec;  // one {cfg.vec}-byte vector of A: {ve} elements
static __device__ __forceinline__ ptxf_avec ptxf_load_a(const {ta}* __restrict__ a, {idx} j)
{{
    return {load_a}(reinterpret_cast<const ptxf_avec*>(a) + j);
}}
static __device__ __forceinline__ void ptxf_unpack_a(const ptxf_avec q, float (&f)[{ve}])
{{
{unpack}
}}
"""
    if not m.v:
        return out
    vdt = m.v_dtype
    chunk = ve * _ITEMSIZE[vdt]  # bytes of v per vector of A
    if chunk == 2:  # one 16-bit element (A f32 at vec 4, v bf16/f16)
        vload = f"    const unsigned short h = __ldg(reinterpret_cast<const unsigned short*>(p));\n    g[0] = {_half_to_float(vdt, 'h')};"
    else:
        stmt, vwords = _load_words(chunk, "p", "__ldg", "w")
        vepw = 4 // _ITEMSIZE[vdt]
        vload = "    " + stmt + "\n" + "\n".join(
            f"    g[{i * vepw + k}] = {e};" for i, word in enumerate(vwords) for k, e in enumerate(word_to_floats(vdt, word))
        )
    out += f"""static __device__ __forceinline__ float ptxf_v2f({tv} x) {{ return {x2f[vdt]}; }}
// {ve} elements of v from a {chunk}-byte aligned address p, as floats.
static __device__ __forceinline__ void ptxf_v_chunk(const {tv}* __restrict__ p, float (&g)[{ve}])
{{
{vload}
}}
// v[j * {ve} .. j * {ve} + {ve - 1}] relative to vh, where vh lies D elements past a {chunk}-byte boundary.
template <int D>
static __device__ __forceinline__ void ptxf_load_v(const {tv}* __restrict__ vh, {idx} j, float (&g)[{ve}])
{{
    if constexpr (D == 0) {{
        ptxf_v_chunk(vh + j * {ve}, g);
    }} else {{  // two aligned chunks; elements D.. of the first, ..D-1 of the second
        const {tv}* __restrict__ c = vh + j * {ve} - D;
        float lo[{ve}], hi[{ve}];
        ptxf_v_chunk(c, lo);
        ptxf_v_chunk(c + {ve}, hi);
#pragma unroll
        for (int k = 0; k < {ve}; ++k) g[k] = k + D < {ve} ? lo[(k + D) % {ve}] : hi[(k + D) % {ve}];
    }}
}}
"""
    return out
