"""The "softmax" family: an expert skeleton for row softmax, ``y[r, :] = softmax(x[r, :])``.

It applies to kernels whose spec reads one ``x[R, C]`` (bf16, f16 or f32), writes one ``y[R, C]`` of
x's dtype and takes exactly two integer scalars equal to ``R`` and ``C``, with
``launch.policy = "free"``. Each candidate is the CUDA template ``softmax.cu`` instantiated with the
user's kernel name, parameter names, types and order, so its ``kernel_text`` drops into their file
in place of the original kernel.

Kernel design (see ``softmax.cu``): each row is split into a scalar head (up to its first 16-byte
boundary), a body of 16-byte vectors and a scalar tail, so any row length and any row start take
the vector path when x and y are congruent modulo 16 bytes (a scalar path otherwise); ``MV``
vectors per thread are loaded at once and kept in registers as fp32 exponentials (exp evaluated
once per element); one (max, sum) reduction per row (online-softmax merge: warp shuffles, then
shared memory across the warps of a row); one reciprocal per thread; 16-byte stores. Threads per
row are chosen at run time from ``C`` as in the "rowwise" family (the fewest that cache the row,
rows per block halving as threads per row double); past the last tier, 2-byte dtypes get a tier that
caches the raw vectors instead (twice the elements in the same registers, exp evaluated twice), and
longer rows stream the rest of the row in chunks (online softmax) and read it again, mostly from L2.
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, replace
from pathlib import Path

from ptxfactory.protocol import Candidate, KernelSpec

from ..base import (combines_elements, square_note, EXP_CALL, LOG_CALL, GenContext, NoFit, family_candidate, family_candidates, fit_check, kernel_linkage,
                    render_params, scalars_unused, shape_dims, size_args, source_mentions, stored_values, walks_columns,
                    pointer_aliases)
from .cuda_text import load_template, floats_to_word, word_to_floats
from .rowwise import _CTYPE, _FLOATS, _ITEMSIZE, _is_2d, grid_expr

_TEMPLATE = Path(__file__).with_name("softmax.cu")
LOG2E = "1.4426950408889634f"  # log2(e): exp(d) = exp2(d * log2(e))
# A 32-bit word of two -inf values (one for f32): the filler of vectors past the end of a row.
_NEG_WORD = {"bf16": "0xff80ff80u", "f16": "0xfc00fc00u", "f32": "0xff800000u"}
# Vectors per thread per chunk when a row is longer than the register cache (bounded register cost).
REMAINDER_CHUNK = 2


@dataclass(frozen=True)
class SoftmaxMatch:
    """How a spec maps onto row softmax: argument names, size symbols and dtypes."""

    x: str
    y: str
    r_arg: str
    c_arg: str
    r_sym: str
    c_sym: str
    dtype: str  # x and y
    c_dtype: str  # dtype of the C scalar (index type)
    stats: tuple[tuple[str, str, str], ...] = ()  # per-row outputs [R]: (name, dtype, statistic or "" until assigned)

    @property
    def vec(self) -> int:
        """Elements per 16-byte vector of x/y."""
        return 16 // _ITEMSIZE[self.dtype]


@dataclass(frozen=True)
class Tier:
    """One branch of the kernel's dispatch on the row length: rows with ``C <= cap`` (``None``: any) use it."""

    tpr: int  # threads per row
    rpb: int  # rows per block
    cap: int | None  # longest row cached in registers by this tier (elements)
    mv: int  # 16-byte vectors cached per thread
    raw: bool  # cache raw vectors (exp twice) instead of fp32 exponentials


@dataclass(frozen=True)
class SoftmaxConfig:
    """One point of the tuning space.

    ``block`` threads per block; ``rows_per_block`` rows per block for the shortest rows (threads per
    row start at ``max(32, block / rows_per_block)``); ``vecs`` 16-byte vectors of x per thread kept
    in registers as fp32 exponentials (``vecs * vec`` floats); ``hint`` "ldg" (x through the
    read-only path) or "stream" (evict-first loads of x, evict-first stores of y); ``exp`` "expf"
    (the accurate libdevice ``expf``) or "exp2" (``ex2.approx.ftz`` on inputs prescaled by log2(e):
    ~2 ulp, results below 2^-126 flushed to zero, which the softmax spec's atol absorbs).
    """

    block: int
    rows_per_block: int
    vecs: int
    hint: str = "ldg"
    exp: str = "exp2"

    def floats(self, vec: int) -> int:
        """fp32 registers of the exponential cache per thread."""
        return self.vecs * vec

    def registers(self, vec: int) -> int:
        """Register budget per thread: 64 for a cache of up to 24 floats, 80 up to 32, else 128 (see ``_SHAPES``)."""
        f = self.floats(vec)
        return 64 if f <= 24 else 80 if f <= 32 else 128

    def min_blocks(self, vec: int) -> int:
        """Blocks per SM promised to ptxas (``__launch_bounds__`` 2nd argument), which caps the registers at ``registers(vec)``."""
        return max(1, 65536 // (self.block * self.registers(vec)))

    @property
    def raw_vecs(self) -> int:
        """Raw 16-byte vectors per thread of the last tier for 2-byte dtypes: ``2 * vecs``, the registers of the fp32 cache."""
        return 2 * self.vecs

    def tiers(self, vec: int) -> list[Tier]:
        """The dispatch, shortest rows first; the last tier takes any length (the rest of the row streamed).

        Threads per row: powers of two from ``max(32, block / rows_per_block)`` to ``block``, rows per
        block halving as they double; a row of ``C`` elements takes the first tier whose cache
        (``tpr * vecs * vec``) holds it. For 2-byte dtypes (``vec == 8``) a last tier with ``block``
        threads caches ``raw_vecs`` raw vectors: the same registers, twice the row.
        """
        tpr, rpb, out = max(32, self.block // self.rows_per_block), self.rows_per_block, []
        while tpr <= self.block:
            out.append(Tier(tpr, rpb, tpr * self.vecs * vec, self.vecs, False))
            tpr *= 2
            rpb = max(1, rpb // 2)
        if vec == 8:
            last = out[-1]
            out.append(Tier(last.tpr, last.rpb, None, self.raw_vecs, True))
        else:
            last = out[-1]
            out[-1] = Tier(last.tpr, last.rpb, None, last.mv, False)
        return out

    def params(self) -> dict:
        return {"block": self.block, "rows_per_block": self.rows_per_block, "vecs": self.vecs, "vec": 16,
                "hint": self.hint, "exp": self.exp,
                "math": "fast" if self.exp == "exp2" else "precise"}  # the knob shared by every generator


@fit_check
def match_spec(spec: KernelSpec) -> SoftmaxMatch | None:
    """The row-softmax mapping of ``spec``, or None when the spec does not have the pattern (or its launch is fixed).

    Pattern: buffers ``x[R, C]`` (in, bf16/f16/f32), ``y[R, C]`` (out, x's dtype) and up to two per-row outputs
    ``[R]`` (float: the row's max, sum of exponentials or log-sum-exp, see :func:`variants`); scalars: two integers
    (i32/i64/u32) whose values are the symbols ``R`` and ``C``, in any order, and any others, passed through unused.
    """
    syms = set(spec.symbols)
    bufs = [a for a in spec.args if a.is_buffer]
    scalars = [a for a in spec.args if not a.is_buffer]
    xs = [a for a in bufs if a.role == "in" and _is_2d(a.shape, syms)]
    if len(xs) != 1:
        raise NoFit(f"two-dimensional inputs: {len(xs)}; it takes one, x[R, C]" + square_note(bufs))
    x = xs[0]
    r_sym, c_sym = (d.strip() for d in x.shape)
    ys = [a for a in bufs if a.role == "out" and list(shape_dims(a.shape)) == [r_sym, c_sym]]
    stats = [a for a in bufs if a.role == "out" and list(shape_dims(a.shape)) == [r_sym] and a.dtype.value in _FLOATS]
    if len(ys) != 1 or len(stats) > 2 or 2 + len(stats) != len(bufs):
        raise NoFit(f"buffers besides x[{r_sym}, {c_sym}], one output of its shape and up to two float [{r_sym}] outputs: "
                    + ", ".join(a.name for a in bufs if a is not x and a not in ys[:1] + stats[:2]))
    y = ys[0]
    if x.dtype.value not in _FLOATS or y.dtype != x.dtype:
        raise NoFit(f"x ({x.dtype.value}) and y ({y.dtype.value}) are not one float dtype")
    sizes = size_args(scalars, r_sym, c_sym)
    if sizes is None:
        raise NoFit(f"no integer scalars equal to {r_sym} and {c_sym}")
    r_arg, c_arg = sizes
    return SoftmaxMatch(
        x=x.name, y=y.name, r_arg=r_arg.name, c_arg=c_arg.name, r_sym=r_sym, c_sym=c_sym,
        dtype=x.dtype.value, c_dtype=c_arg.dtype.value, stats=tuple((a.name, a.dtype.value, "") for a in stats),
    )


# Per-row statistics a softmax kernel stores, as C expressions of the row's (m, s) in exp units (k: the
# prescale, log2(e) for exp2): its maximum, its sum of exp(x - max), its log-sum-exp.
STATS = {"max": "m / k", "sum": "s", "lse": "m / k + logf(s)"}
# Evidence, first match wins, from the output's name, then from what the source stores into it.
_STAT_WORDS = (("lse", r"lse|logsumexp|log"), ("max", r"max|(?<![a-z])mx|(?<![a-z])m(?![a-z])"),
               ("sum", r"sum|denom|norm|(?<![a-z])z(?![a-z])|(?<![a-z])l(?![a-z])"))
_PLAUSIBLE = {1: (("lse",), ("max",), ("sum",)), 2: (("max", "sum"), ("sum", "max"))}


def variants(m: SoftmaxMatch, text: str) -> list[tuple[SoftmaxMatch, bool]]:
    """The concrete forms of ``m`` for the kernel ``text``: ``(match, evidence)``, each per-row output given
    the statistic its name or stored values show (every combination of them), else each plausible one (only
    the first with ``evidence`` True: the others get a probe)."""
    if not m.stats:
        return [(m, True)]
    seen = []
    for name, _, _ in m.stats:
        found = []
        for src in [name] + stored_values(text, name):
            hit = next((s for s, pattern in _STAT_WORDS if re.search(pattern, src, re.I)), None)
            if hit and hit not in found:
                found.append(hit)
        seen.append(found)
    if all(seen):
        choices = [c for c in itertools.product(*seen) if len(set(c)) == len(c)]
    else:
        choices = [c for c in _PLAUSIBLE[len(seen)] if all(not s or c[i] in s for i, s in enumerate(seen))]
    return [(replace(m, stats=tuple((n, dt, s) for (n, dt, _), s in zip(m.stats, c))), all(seen) or k == 0)
            for k, c in enumerate(choices)]


# The (block, rows_per_block, vecs) shapes of the tuning space. Register budget (ptxas 13.0, sm_90a,
# every tier spill-free with expf and exp2, i32 and i64 sizes): a cache of up to 24 floats fits 64
# registers (1024 threads per SM; 32 floats spilled a few bytes with expf), 32 floats fit 80 (768
# threads of 256-thread blocks), up to 64 floats fit 128 (512 threads per SM). Every shape keeps
# 16-48 KB of loads in flight per SM (threads x vectors x 16 B).
_SHAPES = {
    2: ((256, 8, 4), (256, 4, 8), (512, 16, 2), (512, 16, 3), (512, 8, 8), (1024, 32, 3)),  # bf16, f16: 8 per vector
    4: ((256, 8, 8), (256, 4, 12), (512, 16, 4), (512, 16, 5), (512, 8, 12), (1024, 32, 5)),  # f32: 4 per vector
}
HINTS = ("ldg", "stream")
EXPS = ("expf", "exp2")


def tuning_space(m: SoftmaxMatch) -> list[SoftmaxConfig]:
    """Every configuration, in product order (shape, hint, exp): 24 candidates."""
    shapes = _SHAPES[_ITEMSIZE[m.dtype]]
    return [SoftmaxConfig(b, r, v, hint, exp) for (b, r, v), hint, exp in itertools.product(shapes, HINTS, EXPS)]


class SoftmaxFamily:
    """Expert row-softmax skeleton: 24 instances (6 block/rows/cache shapes x 2 load hints x 2 exp functions)."""

    name = "softmax"

    def _match(self, ctx: GenContext) -> tuple[SoftmaxMatch | None, str | None]:
        """The spec's match where the skeleton computes the kernel's function, else None and why."""
        if not source_mentions(ctx.source, EXP_CALL):
            return None, "the source calls no exponential: not a softmax"
        if not combines_elements(ctx.source):
            return None, ("no loop, shuffle, barrier or atomic in the source: each output is a function of its own "
                          "element (an activation), not of its row's sum")
        m = match_spec(ctx.spec)
        if m is None:
            return None, match_spec.why(ctx.spec)
        if not scalars_unused(ctx.spec, ctx.kernel.text, {m.r_arg, m.c_arg}):
            return None, "a scalar besides the row count and length (a temperature, a scale) is part of the kernel's math"
        if walks_columns(ctx.kernel.text, m.x):
            return None, f"its loops read {m.x} down columns: a softmax over dimension 0 (the skeleton normalises rows)"
        if any(re.search(LOG_CALL, v) for out in (m.y, *pointer_aliases(ctx.kernel.text, m.y))
               for v in stored_values(ctx.kernel.text, out)):
            return None, (f"the values stored to {m.y} take a logarithm (a log-softmax, x - max - log(sum)): the skeleton "
                          "writes exp(x - max) / sum")
        return m, None

    def why_not(self, ctx: GenContext) -> str | None:
        """Why the skeleton does not fit ``ctx``'s spec or source (None where it does; what no family takes, a template
        or a signature unlike the spec, is :func:`~ptxfactory.search.base.kernel_refusal`'s)."""
        return self._match(ctx)[1]

    def propose(self, ctx: GenContext) -> list[Candidate]:
        m, _ = self._match(ctx)
        pairs = [(f, cfg) for f, evidence in (variants(m, ctx.kernel.text) if m else [])
                 for cfg in (tuning_space(f) if evidence else tuning_space(f)[:1])]
        return family_candidates(ctx, bool(pairs), pairs, lambda fc: self.instantiate(ctx, *fc))

    def instantiate(self, ctx: GenContext, m: SoftmaxMatch, cfg: SoftmaxConfig) -> Candidate:
        """The candidate for one configuration (the spec must match: ``m = match_spec(ctx.spec)``)."""
        text = render_kernel(ctx, m, cfg)
        tiers = cfg.tiers(m.vec)
        desc = (
            f"softmax block={cfg.block} rpb={tiers[0].rpb}..{tiers[-1].rpb} vec16x{cfg.vecs} "
            f"tpr={tiers[0].tpr}..{tiers[-1].tpr} {cfg.exp}" + (" stream" if cfg.hint == "stream" else "")
        )
        params = cfg.params()
        if m.stats:
            params["stats"] = ",".join(s for _, _, s in m.stats)
            desc += " stats=" + ",".join(f"{n}:{s}" for n, _, s in m.stats)
        return family_candidate(ctx, self.name, text, launch_grid(tiers, m), cfg.block, desc, params)


def launch_grid(tiers: list[Tier], m: SoftmaxMatch) -> str:
    """``cdiv(R, rows_per_block(C))`` as a launch expression matching the kernel's dispatch."""
    return grid_expr([(t.tpr, t.rpb, t.cap) for t in tiers], m.r_sym, m.c_sym)



def render_kernel(ctx: GenContext, m: SoftmaxMatch, cfg: SoftmaxConfig) -> str:
    """The kernel text (helpers + ``__global__`` definition) for one configuration, in the user's signature."""
    tx = _CTYPE[m.dtype]
    idx = "int" if m.c_dtype == "i32" else "long long"
    ts = [_CTYPE[m.stats[i][1]] if i < len(m.stats) else "float" for i in range(2)]
    s_args = [m.stats[i][0] if i < len(m.stats) else f"static_cast<{ts[i]}*>(nullptr)" for i in range(2)]
    args = f"{m.x}, {m.y}, (long long){m.r_arg}, ({idx}){m.c_arg}, {s_args[0]}, {s_args[1]}"
    tiers = cfg.tiers(m.vec)
    lines = []
    for i, t in enumerate(tiers):
        call = f"ptxf_softmax<{t.tpr}, {t.rpb}, {t.mv}, {'true' if t.raw else 'false'}>({args});"
        lines.append("    " + ("else " if i else "") + (call if t.cap is None else f"if ({m.c_arg} <= {t.cap}) {call}"))
    linkage = kernel_linkage(ctx.kernel)
    if cfg.exp == "exp2":
        ex_body = 'float r; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(d)); return r;'
        k = LOG2E
    else:
        ex_body = "return expf(d);"
        k = "1.0f"
    body = load_template(_TEMPLATE).substitute(
        CONVERT=_convert(m, cfg, tx), TX=tx, TS0=ts[0], TS1=ts[1], IDX=idx, VEC=m.vec, BLOCK=cfg.block, K=k, EX_BODY=ex_body,
        LOAD_X="__ldcs" if cfg.hint == "stream" else "__ldg", NEG_WORD=_NEG_WORD[m.dtype], RCH=REMAINDER_CHUNK,
        LINKAGE=linkage, KERNEL=ctx.kernel.name, PARAMS=render_params(ctx.kernel), MINB=cfg.min_blocks(m.vec),
        X=m.x, Y=m.y, DISPATCH="\n".join(lines),
    )
    # The helpers are C++ templates: give them C++ linkage even when the kernel sits in an extern "C" block.
    head, sep, kernel = body.rpartition(f"{linkage}__global__ void __launch_bounds__")
    launch = f"// Launch: grid ({launch_grid(tiers, m)},), block ({cfg.block},), no dynamic shared memory.\n"
    return f'extern "C++" {{\n{head.rstrip()}\n}}  // extern "C++"\n\n{launch}{sep}{kernel}'


def _convert(m: SoftmaxMatch, cfg: SoftmaxConfig, tx: str) -> str:
    """Dtype-specific helpers: scalar conversions, unpacking/packing 16-byte vectors, the y store."""
    vec = m.vec
    epw = 4 // _ITEMSIZE[m.dtype]  # elements per 32-bit word
    x2f = {"bf16": "__bfloat162float(v)", "f16": "__half2float(v)", "f32": "v"}[m.dtype]
    f2y = {"bf16": "__float2bfloat16(f)", "f16": "__float2half(f)", "f32": "f"}[m.dtype]
    unpack = "\n".join(
        f"    f[{j * epw + k}] = {e};" for j, comp in enumerate("xyzw") for k, e in enumerate(word_to_floats(m.dtype, f"u.{comp}"))
    )
    pack = ", ".join(floats_to_word(m.dtype, [f"o[{j * epw + k}]" for k in range(epw)]) for j in range(4))
    store = "__stcs(p, v);" if cfg.hint == "stream" else "*p = v;"
    ts = [_CTYPE[m.stats[i][1]] if i < len(m.stats) else "float" for i in range(2)]
    f2t = {"bf16": "__float2bfloat16({})", "f16": "__float2half({})", "f32": "{}"}
    stat_stores = " ".join(f"s{i}[row] = {f2t[dt].format(STATS[s])};" for i, (_, dt, s) in enumerate(m.stats))
    return f"""
static __device__ __forceinline__ bool ptxf_aligned(const void* p, unsigned a) {{ return (reinterpret_cast<unsigned long long>(p) & (a - 1)) == 0; }}
static __device__ __forceinline__ float ptxf_neg_inf() {{ return __int_as_float(0xff800000); }}
static __device__ __forceinline__ float ptxf_x2f({tx} v) {{ return {x2f}; }}
static __device__ __forceinline__ {tx} ptxf_f2y(float f) {{ return {f2y}; }}
static __device__ __forceinline__ void ptxf_unpack_x(const uint4 u, float (&f)[{vec}])
{{
{unpack}
}}
static __device__ __forceinline__ uint4 ptxf_pack(const float (&o)[{vec}]) {{ return make_uint4({pack}); }}
static __device__ __forceinline__ void ptxf_store_y(uint4* p, const uint4 v) {{ {store} }}
// the row's statistics ({", ".join(f"{n}: {s}" for n, _, s in m.stats) or "none"}) from its (m, s) in exp units; k: the prescale
static __device__ __forceinline__ void ptxf_store_stats({ts[0]}* __restrict__ s0, {ts[1]}* __restrict__ s1, long long row,
                                                        float m, float s, float k) {{ {stat_stores} }}
"""
