"""The "rowwise" family: an expert skeleton for row-wise normalisation (RMSNorm, LayerNorm).

It applies to kernels whose spec reads ``x[R, C]`` (bf16, f16 or f32), optionally ``w[C]`` and then
``b[C]`` (in signature order: the weight, then the bias, added after scaling), writes ``y[R, C]`` of
x's dtype, and takes scalars equal to ``R``, to ``C`` and a constant float ``eps``, with
``launch.policy = "free"``. A spec with a bias is LayerNorm (``y = (x - mean) * rstd * w + b``):
every candidate is then a LayerNorm; without one, the candidates are RMSNorm plus two LayerNorm
probes. Each candidate is the CUDA template ``rowwise.cu`` instantiated
with the user's kernel name, parameter names, types and order, so its ``kernel_text`` drops into
their file in place of the original kernel.

Kernel design (see ``rowwise.cu``): 16-byte vector loads/stores when ``C`` is a multiple of the
vector width and the pointers are 16-byte aligned (a scalar path otherwise); ``MV`` vectors per
thread cached in registers between the reduction and the write (longer rows re-read the rest);
fp32 accumulation; warp shuffles plus shared memory across the warps of one row; LayerNorm's
variance as a second pass over the register-cached row (squared deviations from the mean, no
``E[x^2] - mean^2`` cancellation). A candidate fixes
the block size, rows per block (for short rows) and register cache; the threads per row are chosen
at run time from ``C`` among the powers of two between ``block / rows_per_block`` (at least 32)
and ``block``: the fewest threads whose register cache holds the row. With ``grid = "adaptive"``
the rows per block shrink as the threads per row grow, so the grid is the piecewise expression
``cdiv(R, rows_per_block(C))`` (only ``min``/``max``/``cdiv``, as protocol.expr allows); with
``grid = "fixed"`` it is ``cdiv(R, rows_per_block)`` and long rows are taken in several steps.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ptxfactory.protocol import Candidate, KernelSpec

from ..base import GenContext, family_candidate, family_candidates, size_args
from .cuda_text import load_template, floats_to_word, word_to_floats

_TEMPLATE = Path(__file__).with_name("rowwise.cu")
_FLOATS = ("bf16", "f16", "f32")
_CTYPE = {"bf16": "__nv_bfloat16", "f16": "__half", "f32": "float"}
_ITEMSIZE = {"bf16": 2, "f16": 2, "f32": 4}


@dataclass(frozen=True)
class RowwiseMatch:
    """How a spec maps onto the row-wise pattern: argument names, size symbols and dtypes."""

    x: str
    w: str | None
    y: str
    r_arg: str
    c_arg: str
    eps_arg: str
    r_sym: str
    c_sym: str
    dtype: str  # x and y
    w_dtype: str | None
    c_dtype: str  # dtype of the C scalar (index type)
    b: str | None = None  # the bias (LayerNorm), after the weight in signature order
    b_dtype: str | None = None

    @property
    def vec(self) -> int:
        """Elements per 16-byte vector of x/y."""
        return 16 // _ITEMSIZE[self.dtype]


@dataclass(frozen=True)
class RowwiseConfig:
    """One point of the tuning space.

    ``block`` threads per block; ``rows_per_block`` rows per block for the shortest rows (the
    smallest threads-per-row tier); ``vecs`` 16-byte vectors of x cached per thread; ``hint``
    "ldg" (x through the read-only path) or "stream" (evict-first loads of x, stores of y);
    ``grid`` "adaptive" (rows per block halve as threads per row double, so one block always
    holds ``block`` threads' worth of rows: the grid expression is piecewise in C) or "fixed"
    (``rows_per_block`` at every row length, longer rows taken in several steps: grid
    ``cdiv(R, rows_per_block)``); ``norm`` "rms" or "layer".
    """

    block: int
    rows_per_block: int
    vecs: int
    hint: str = "ldg"
    grid: str = "adaptive"
    norm: str = "rms"

    @property
    def min_blocks(self) -> int:
        """Blocks per SM promised to ptxas (``__launch_bounds__`` 2nd argument): caps registers at 64 (128 for a 16-vector cache)."""
        return max(1, 65536 // (self.block * (128 if self.vecs > 8 else 64)))

    def tiers(self, vec: int) -> list[tuple[int, int, int]]:
        """``(threads_per_row, rows_per_block, max_C)`` per tier, smallest rows first (the last tier has no limit).

        Threads per row: powers of two from ``max(32, block / rows_per_block)`` to ``block``; a row
        of ``C`` elements takes the first tier whose register cache (``tpr * vecs * vec``) holds it.
        """
        tpr, out = max(32, self.block // self.rows_per_block), []
        rpb = self.rows_per_block
        while tpr <= self.block:
            out.append((tpr, rpb, tpr * self.vecs * vec))
            tpr *= 2
            if self.grid == "adaptive":
                rpb = max(1, rpb // 2)
        return out

    def params(self) -> dict:
        return {
            "norm": self.norm, "block": self.block, "rows_per_block": self.rows_per_block,
            "vecs": self.vecs, "hint": self.hint, "grid": self.grid,
        }


def rows_per_block_expr(tiers: list[tuple[int, int, int]], c_sym: str) -> str:
    """Rows per block as an expression of the row length ``c_sym`` (integer, >= 1), matching the kernel's dispatch."""
    values = [rpb for _, rpb, _ in tiers]
    expr = str(values[-1])
    for (_, rpb, cap), (_, nxt, _) in zip(tiers, tiers[1:]):
        if rpb != nxt:  # + (rpb - nxt) when c_sym <= cap
            expr += f" + {rpb - nxt} * min(1, max(0, {cap + 1} - {c_sym}))"
    return expr


def grid_expr(tiers: list[tuple[int, int, int]], r_sym: str, c_sym: str) -> str:
    """``cdiv(R, rows_per_block(C))``, simplified when rows per block is constant."""
    rpb = rows_per_block_expr(tiers, c_sym)
    return r_sym if rpb == "1" else f"cdiv({r_sym}, {rpb})"


def match_spec(spec: KernelSpec) -> RowwiseMatch | None:
    """The row-wise mapping of ``spec``, or None when the spec does not have the pattern (or its launch is fixed)."""
    if spec.launch.policy != "free":
        return None
    syms = set(spec.symbols)
    bufs = [a for a in spec.args if a.is_buffer]
    scalars = [a for a in spec.args if not a.is_buffer]
    xs = [a for a in bufs if a.role == "in" and _is_2d(a.shape, syms)]
    ys = [a for a in bufs if a.role == "out"]
    if len(xs) != 1 or len(ys) != 1:
        return None
    x, y = xs[0], ys[0]
    r_sym, c_sym = x.shape
    if x.dtype.value not in _FLOATS or y.dtype != x.dtype or list(y.shape) != [r_sym, c_sym]:
        return None
    ws = [a for a in bufs if a is not x and a is not y]  # weight, then bias, in signature order
    if len(ws) > 2 or any(a.role != "in" or list(a.shape) != [c_sym] or a.dtype.value not in _FLOATS for a in ws):
        return None
    w = ws[0] if ws else None
    b = ws[1] if len(ws) > 1 else None
    sizes = size_args(scalars, r_sym, c_sym)
    eps = [a for a in scalars if a.dtype.value in ("f32", "f64") and isinstance(a.value, (int, float))]
    if sizes is None or len(eps) != 1 or len(scalars) != 3:
        return None
    r_arg, c_arg = sizes
    return RowwiseMatch(
        x=x.name, w=w.name if w else None, y=y.name, r_arg=r_arg.name, c_arg=c_arg.name, eps_arg=eps[0].name,
        r_sym=r_sym, c_sym=c_sym, dtype=x.dtype.value, w_dtype=w.dtype.value if w else None, c_dtype=c_arg.dtype.value,
        b=b.name if b else None, b_dtype=b.dtype.value if b else None,
    )


def _is_2d(shape, syms: set[str]) -> bool:
    return (
        shape is not None and len(shape) == 2 and all(isinstance(d, str) and d.strip() in syms for d in shape)
        and shape[0].strip() != shape[1].strip()
    )


# Default order (block, rows_per_block, cache as a multiple of fit(block), hint, grid), from an H200
# sweep (bf16, M x N = 32768 x {1024, 4096, 16384} and 8192 x 7168; device copy 4.25 TB/s): the first
# reached 3.56 / 4.06 / 4.20 / 3.77 TB/s, 2.79x the example kernel; "stream" cost ~4%, "fixed" ~5%.
_ORDER = (
    (512, 16, 1, "ldg", "adaptive"), (256, 8, 1, "ldg", "adaptive"), (512, 16, 2, "ldg", "adaptive"),
    (256, 8, 0.5, "ldg", "adaptive"), (512, 8, 1, "ldg", "adaptive"), (128, 4, 0.5, "ldg", "adaptive"),
    (256, 4, 1, "ldg", "adaptive"), (512, 16, 1, "stream", "adaptive"), (256, 8, 1, "ldg", "fixed"),
    (512, 16, 1, "ldg", "fixed"), (256, 16, 1, "ldg", "adaptive"), (512, 32, 1, "ldg", "adaptive"),
    (256, 8, 0.5, "stream", "adaptive"), (256, 8, 1, "stream", "adaptive"), (1024, 32, 2, "ldg", "adaptive"),
    (256, 8, 0.5, "ldg", "fixed"), (256, 4, 1, "ldg", "fixed"), (128, 4, 0.5, "ldg", "fixed"),
    (128, 4, 1, "ldg", "adaptive"), (256, 8, 2, "ldg", "adaptive"), (512, 16, 0.5, "ldg", "adaptive"),
    (1024, 32, 1, "ldg", "adaptive"),
)


def _configs(m: RowwiseMatch, spec: KernelSpec) -> list[RowwiseConfig]:
    """The whole space: LayerNorm only with a bias (an RMSNorm with a bias is no standard operation),
    else the RMS space plus its first two points as LayerNorm (the verifier tells which one fits)."""
    configs = tuning_space(m, spec)
    if m.b:
        return [RowwiseConfig(c.block, c.rows_per_block, c.vecs, c.hint, c.grid, "layer") for c in configs]
    return configs + [RowwiseConfig(c.block, c.rows_per_block, c.vecs, c.hint, c.grid, "layer") for c in configs[:2]]


def tuning_space(m: RowwiseMatch, spec: KernelSpec) -> list[RowwiseConfig]:
    """RMS configurations, best first (``_ORDER``), with register caches sized from the longest benchmark row.

    ``fit(block)`` is the smallest power-of-two cache (at most 16 vectors) that holds the longest
    bench row with ``block`` threads per row; each entry asks for half, one or two times that.
    """
    c_max = max(int(s[m.c_sym]) for s in spec.bench.sizes)
    nvec = -(-c_max // m.vec)

    def fit(block: int, mult: float) -> int:
        v = 1
        while v < 16 and block * v < nvec:
            v *= 2
        return int(min(16, max(1, v * mult)))

    out = [RowwiseConfig(b, r, fit(b, k), hint, grid) for b, r, k, hint, grid in _ORDER]
    return list(dict.fromkeys(out))  # drop duplicates (small rows), keep the order


class RowwiseNormFamily:
    """Expert row-wise normalisation skeleton.

    Without a bias: 22 RMSNorm instances plus 2 LayerNorm ones (on an RMSNorm kernel the latter must
    fail verification). With a bias (``b[C]``): the same 22 configurations as LayerNorm.
    """

    name = "rowwise"

    def propose(self, ctx: GenContext) -> list[Candidate]:
        m = match_spec(ctx.spec)
        return family_candidates(ctx, m is not None, _configs(m, ctx.spec) if m else (), lambda cfg: self.instantiate(ctx, m, cfg))

    def instantiate(self, ctx: GenContext, m: RowwiseMatch, cfg: RowwiseConfig) -> Candidate:
        """The candidate for one configuration (the spec must match: ``m = match_spec(ctx.spec)``)."""
        text = render_kernel(ctx, m, cfg)
        tiers = cfg.tiers(m.vec)
        desc = (
            f"rowwise {cfg.norm} block={cfg.block} rpb={cfg.rows_per_block}{'' if cfg.grid == 'fixed' else '..' + str(tiers[-1][1])} "
            f"vec16x{cfg.vecs} tpr={tiers[0][0]}..{tiers[-1][0]}" + (" stream" if cfg.hint == "stream" else "")
        )
        grid = grid_expr(tiers, m.r_sym, m.c_sym)
        return family_candidate(ctx, self.name, text, grid, cfg.block, desc, cfg.params())



def render_kernel(ctx: GenContext, m: RowwiseMatch, cfg: RowwiseConfig) -> str:
    """The kernel text (helpers + ``__global__`` definition) for one configuration, in the user's signature."""
    tx = _CTYPE[m.dtype]
    tw = _CTYPE[m.w_dtype or m.dtype]
    tb = _CTYPE[m.b_dtype or m.w_dtype or m.dtype]
    idx = "int" if m.c_dtype == "i32" else "long long"
    vec = m.vec
    layer = "true" if cfg.norm == "layer" else "false"
    params = []
    for p in ctx.kernel.params:
        const = "const " if p.is_const else ""
        params.append(f"{const}{p.type}* __restrict__ {p.name}" if p.is_pointer else f"{const}{p.type} {p.name}")
    w_arg = m.w if m.w else f"static_cast<const {tw}*>(nullptr)"
    b_arg = m.b if m.b else f"static_cast<const {tb}*>(nullptr)"
    args = f"{m.x}, {w_arg}, {b_arg}, {m.y}, (long long){m.r_arg}, ({idx}){m.c_arg}, (float){m.eps_arg}, ptxf_red, ptxf_vec"
    tiers = cfg.tiers(vec)
    lines = []
    for i, (tpr, rpb, cap) in enumerate(tiers):
        call = f"ptxf_rowwise<{tpr}, {rpb}, {cfg.vecs}, {layer}>({args});"
        last = i == len(tiers) - 1
        lines.append("    " + ("else " if i else "") + (call if last else f"if ({m.c_arg} <= {cap}) {call}"))
    w_bytes = vec * _ITEMSIZE[m.w_dtype or m.dtype]
    w_aligned = f" && ptxf_aligned({m.w}, {min(16, w_bytes)})" if m.w else ""
    b_aligned = f" && ptxf_aligned({m.b}, {min(16, vec * _ITEMSIZE[m.b_dtype])})" if m.b else ""
    w_scalar = "o * ptxf_w2f(w[j])" if m.w else "o"  # w, b: ptxf_rowwise's parameters, whatever the user's names
    if m.b:
        w_scalar += " + ptxf_b2f(b[j])"
    linkage = 'extern "C" ' if re.match(r'extern\s+"C"\s*(?!\{)', ctx.kernel.text.lstrip()) else ""
    body = load_template(_TEMPLATE).substitute(
        CONVERT=_convert(m, cfg, tx, tw, tb, idx),
        TX=tx, TW=tw, TB=tb, IDX=idx, VEC=vec, BLOCK=cfg.block,
        LOAD_X="__ldcs" if cfg.hint == "stream" else "__ldg",
        W_SCALAR=w_scalar, B_ALIGNED=b_aligned,
        LINKAGE=linkage, KERNEL=ctx.kernel.name, PARAMS=", ".join(params),
        MINB=cfg.min_blocks, C=m.c_arg, X=m.x, Y=m.y, W_ALIGNED=w_aligned, DISPATCH="\n".join(lines),
    )
    # The helpers are C++ templates: give them C++ linkage even when the kernel sits in an extern "C" block.
    head, sep, kernel = body.rpartition(f"{linkage}__global__ void __launch_bounds__")
    launch = f"// Launch: grid ({grid_expr(tiers, m.r_sym, m.c_sym)},), block ({cfg.block},), no dynamic shared memory.\n"
    return f'extern "C++" {{\n{head.rstrip()}\n}}  // extern "C++"\n\n{launch}{sep}{kernel}'




def _vector_load(ptr: str, dt: str, vec: int, out: str, tag: str) -> str:
    """C statements loading the ``vec`` elements of a ``[C]`` vector ``ptr`` (dtype ``dt``) at vector index ``v``
    into ``float {out}[vec]``: 8, 16 or 32 bytes through the read-only path."""
    nbytes = vec * _ITEMSIZE[dt]
    if nbytes == 8:
        load = (f"    const uint2 {tag}q = __ldg(reinterpret_cast<const uint2*>({ptr}) + v);\n"
                f"    const unsigned {tag}d[2] = {{{tag}q.x, {tag}q.y}};")
    elif nbytes == 16:
        load = (f"    const uint4 {tag}q = __ldg(reinterpret_cast<const uint4*>({ptr}) + v);\n"
                f"    const unsigned {tag}d[4] = {{{tag}q.x, {tag}q.y, {tag}q.z, {tag}q.w}};")
    else:
        load = (f"    const uint4 {tag}q0 = __ldg(reinterpret_cast<const uint4*>({ptr}) + 2 * v), "
                f"{tag}q1 = __ldg(reinterpret_cast<const uint4*>({ptr}) + 2 * v + 1);\n"
                f"    const unsigned {tag}d[8] = {{{tag}q0.x, {tag}q0.y, {tag}q0.z, {tag}q0.w, {tag}q1.x, {tag}q1.y, {tag}q1.z, {tag}q1.w}};")
    epw = 4 // _ITEMSIZE[dt]
    unpack = "\n".join(
        f"    {out}[{j * epw + k}] = {e};" for j in range(nbytes // 4) for k, e in enumerate(word_to_floats(dt, f"{tag}d[{j}]"))
    )
    return f"    float {out}[{vec}];\n{load}\n{unpack}"


def _convert(m: RowwiseMatch, cfg: RowwiseConfig, tx: str, tw: str, tb: str, idx: str) -> str:
    """Dtype-specific helpers: scalar conversions, unpacking/packing 16-byte vectors, the w and b loads, the y store."""
    vec = m.vec
    epw = 4 // _ITEMSIZE[m.dtype]  # x elements per 32-bit word
    wdt = m.w_dtype or m.dtype
    bdt = m.b_dtype or wdt
    x2f = {"bf16": "__bfloat162float(v)", "f16": "__half2float(v)", "f32": "v"}
    f2y = {"bf16": "__float2bfloat16(f)", "f16": "__float2half(f)", "f32": "f"}[m.dtype]
    unpack = "\n".join(
        f"    f[{j * epw + k}] = {e};" for j, comp in enumerate("xyzw") for k, e in enumerate(word_to_floats(m.dtype, f"u.{comp}"))
    )
    pack = ", ".join(floats_to_word(m.dtype, [f"o[{j * epw + k}]" for k in range(epw)]) for j in range(4))
    w_bytes = vec * _ITEMSIZE[wdt]  # w: VEC elements of w's dtype at vector index v: 8, 16 or 32 bytes
    expr = "(f[k] - mean) * scale"
    loads = []
    if m.w:
        loads.append(_vector_load("w", wdt, vec, "g", "w"))
        expr = f"({expr}) * g[k]"
    if m.b:
        loads.append(_vector_load("b", bdt, vec, "h", "b"))
        expr = f"{expr} + h[k]"
    norm_body = "\n".join(loads + [f"    float o[{vec}];\n#pragma unroll\n    for (int k = 0; k < {vec}; ++k) o[k] = {expr};"])
    store = "__stcs(p, v);" if cfg.hint == "stream" else "*p = v;"
    w2f = "" if not m.w else f"static __device__ __forceinline__ float ptxf_w2f({tw} v) {{ return {x2f[wdt]}; }}\n"
    b2f = "" if not m.b else f"static __device__ __forceinline__ float ptxf_b2f({tb} v) {{ return {x2f[bdt]}; }}\n"
    return f"""
static __device__ __forceinline__ bool ptxf_aligned(const void* p, unsigned a) {{ return (reinterpret_cast<unsigned long long>(p) & (a - 1)) == 0; }}
static __device__ __forceinline__ float ptxf_x2f({tx} v) {{ return {x2f[m.dtype]}; }}
static __device__ __forceinline__ {tx} ptxf_f2y(float f) {{ return {f2y}; }}
{w2f}{b2f}static __device__ __forceinline__ void ptxf_unpack_x(const uint4 u, float (&f)[{vec}])
{{
{unpack}
}}
static __device__ __forceinline__ void ptxf_store_y(uint4* p, const uint4 v) {{ {store} }}
// y for one vector: ((x - mean) * scale) [* w] [+ b] in fp32, rounded once to {m.dtype}; w read as {w_bytes} bytes at vector index v.
static __device__ __forceinline__ uint4 ptxf_norm(const float (&f)[{vec}], const {tw}* __restrict__ w, const {tb}* __restrict__ b,
                                                  {idx} v, float mean, float scale)
{{
{norm_body}
    return make_uint4({pack});
}}
"""
