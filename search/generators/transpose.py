"""The "transpose" family: an expert skeleton for ``y[C, R] = x[R, C]`` through shared-memory tiles.

It applies to kernels whose spec reads ``x[R, C]`` and writes ``y[C, R]`` of the same dtype (bf16,
f16 or f32), with exactly two integer scalars equal to ``R`` and ``C`` and ``launch.policy = "free"``.
Each candidate is the CUDA text of :data:`_TEMPLATE`, instantiated with the user's kernel name and
parameter names, types and order, so its ``kernel_text`` drops into their file in place of the
original kernel. Elements are moved as raw bits (``unsigned`` / ``unsigned short``): the output is
bit-identical to any correct transpose (NaN payloads included).

Kernel design: one block per ``tile x tile`` tile of x (a 1-D grid, tile column fastest; no grid.y,
so no 65535 limit on R); ``block = 32 x rows`` threads. Phase 1 reads the tile row by row (each
thread ``vec`` bytes per access, a warp covers ``32 x vec`` contiguous bytes of a row, all of a
thread's loads issued before its shared-memory stores) into ``tile[t][t + pad]``; after one barrier,
phase 2 reads the tile column-wise from shared memory and writes y rows with the same vector width.
The padding (one element) shifts each tile row by one bank, so the column reads of phase 2 hit
distinct banks. Vector accesses need row lengths divisible by the vector width and aligned
pointers; each side checks its own condition at run time (``C`` and x for reads, ``R`` and y for
writes) and falls back to one element per access, so odd sides, one row or one column all work.

Knobs (``params``): ``tile`` (32 or 64), ``rows`` (block rows: block = 32 x rows threads),
``pad`` (0 or 1 element per shared-memory row), ``vec`` (bytes per global access: 4 or 16, rounded
up to one element), and ``block`` (= 32 x rows, the shared knob name for threads per block).
"""
from __future__ import annotations

import itertools
import re
import string
from dataclasses import dataclass

from ptxfactory.protocol import Candidate, KernelSpec

from ..base import GenContext, NoFit, family_candidate, family_candidates, fit_check, shape_dims, size_args

_DTYPES = ("bf16", "f16", "f32")
_ITEMSIZE = {"bf16": 2, "f16": 2, "f32": 4}
_RAW = {2: "unsigned short", 4: "unsigned"}
_VT = {4: "unsigned", 8: "uint2", 16: "uint4"}
_PARTS = {4: ["u"], 8: ["u.x", "u.y"], 16: ["u.x", "u.y", "u.z", "u.w"]}


@dataclass(frozen=True)
class TransposeMatch:
    """How a spec maps onto ``y[C, R] = x[R, C]``: argument names, size symbols, the dtype."""

    x: str
    y: str
    r_arg: str
    c_arg: str
    r_sym: str
    c_sym: str
    dtype: str


@dataclass(frozen=True)
class TransposeConfig:
    """One point of the tuning space: ``tile`` (elements per tile side), ``rows`` (block = 32 x rows threads),
    ``pad`` (elements added to each shared-memory tile row), ``vec`` (bytes per global access)."""

    tile: int
    rows: int
    pad: int
    vec: int

    @property
    def threads(self) -> int:
        return 32 * self.rows

    def elems(self, dtype: str) -> int:
        """Elements per vector access (at least 1)."""
        return max(1, self.vec // _ITEMSIZE[dtype])

    def valid(self, dtype: str) -> bool:
        """Every thread has at least one vector per phase: ``threads x elems <= tile^2``."""
        return self.threads * self.elems(dtype) <= self.tile * self.tile and self.tile % 32 == 0

    @property
    def min_blocks(self) -> int:
        """Blocks per SM promised to ptxas (``__launch_bounds__`` 2nd argument): caps registers at 64."""
        return max(1, 1024 // self.threads)

    def smem_bytes(self, dtype: str) -> int:
        return self.tile * (self.tile + self.pad) * _ITEMSIZE[dtype]

    def params(self) -> dict:
        return {"tile": self.tile, "rows": self.rows, "block": self.threads, "pad": self.pad, "vec": self.vec}


def grid_expr(m: TransposeMatch, cfg: TransposeConfig) -> str:
    """One block per tile: ``cdiv(R, tile) * cdiv(C, tile)`` (the kernel splits blockIdx.x the same way)."""
    return f"cdiv({m.r_sym}, {cfg.tile}) * cdiv({m.c_sym}, {cfg.tile})"


@fit_check
def match_spec(spec: KernelSpec) -> TransposeMatch | None:
    """The transpose mapping of ``spec``, or None when the spec does not have the pattern (or its launch is fixed)."""
    syms = set(spec.symbols)
    bufs = [a for a in spec.args if a.is_buffer]
    scalars = [a for a in spec.args if not a.is_buffer]
    if len(bufs) != 2 or len(scalars) != 2:
        raise NoFit(f"buffers: {len(bufs)}, scalars: {len(scalars)}; it takes x, y and their two sizes")
    ins = [a for a in bufs if a.role == "in"]
    outs = [a for a in bufs if a.role == "out"]
    if len(ins) != 1 or len(outs) != 1:
        raise NoFit("not one input and one output buffer")
    x, y = ins[0], outs[0]
    xd, yd = shape_dims(x.shape), shape_dims(y.shape)
    if len(xd) != 2 or not all(isinstance(d, str) and d in syms for d in xd) or xd[0] == xd[1]:
        raise NoFit(f"the input {x.name} is not [R, C] in two distinct size symbols")
    r_sym, c_sym = xd
    if yd != (c_sym, r_sym) or x.dtype != y.dtype or x.dtype.value not in _DTYPES:
        raise NoFit(f"the output {y.name} is not [{c_sym}, {r_sym}] of {x.name}'s dtype (bf16, f16 or f32)")
    sizes = size_args(scalars, r_sym, c_sym)
    if sizes is None:
        raise NoFit(f"no integer scalars equal to {r_sym} and {c_sym}")
    r_arg, c_arg = sizes
    return TransposeMatch(x=x.name, y=y.name, r_arg=r_arg.name, c_arg=c_arg.name, r_sym=r_sym, c_sym=c_sym, dtype=x.dtype.value)


def tuning_space(dtype: str) -> list[TransposeConfig]:
    """``tile x rows x pad x vec`` over (32, 64) x (8, 16) x (1, 0) x (4, 16), in product order (the padded
    tile first: the textbook default), without the configurations that leave threads idle
    (:meth:`TransposeConfig.valid`): 14 for f32, 12 for 2-byte dtypes."""
    space = itertools.product((32, 64), (8, 16), (1, 0), (4, 16))
    return [c for c in (TransposeConfig(*p) for p in space) if c.valid(dtype)]


class TransposeFamily:
    """Expert shared-memory tiled transpose: 12-14 instances over tile, block rows, padding and vector width."""

    name = "transpose"

    def why_not(self, ctx: GenContext) -> str | None:
        """Why the skeleton does not fit ``ctx``'s spec or source (None where it does; what no family takes, a template
        or a signature unlike the spec, is :func:`~ptxfactory.search.base.kernel_refusal`'s)."""
        return match_spec.why(ctx.spec)

    def propose(self, ctx: GenContext) -> list[Candidate]:
        m = match_spec(ctx.spec)
        return family_candidates(ctx, m is not None, tuning_space(m.dtype) if m else (), lambda cfg: self.instantiate(ctx, m, cfg))

    def instantiate(self, ctx: GenContext, m: TransposeMatch, cfg: TransposeConfig) -> Candidate:
        """The candidate for one configuration (the spec must match: ``m = match_spec(ctx.spec)``)."""
        text = render_kernel(ctx, m, cfg)
        desc = (
            f"transpose tile={cfg.tile} block=32x{cfg.rows} pad={cfg.pad} vec={cfg.vec}B "
            f"({cfg.tile * cfg.tile // cfg.threads} elements/thread)"
        )
        return family_candidate(ctx, self.name, text, grid_expr(m, cfg), cfg.threads, desc, cfg.params())


_TEMPLATE = string.Template("""\
// ptxfactory "transpose" family: y[C, R] = x[R, C], ${DTYPE} moved as raw ${ES}-byte words.
// One block per ${T} x ${T} tile of x (blockIdx.x = tile row * tiles per row + tile column), ${THREADS}
// threads. Phase 1: each thread reads VR elements (one ${VB}-byte vector when C % ${V} == 0 and x is
// aligned, else one element) per tile row it owns, all loads before the shared-memory stores. Phase 2,
// after one barrier: each thread gathers VW elements down a tile column (VW consecutive y elements)
// and writes them with one store (vectorised when R % ${V} == 0 and y is aligned). Shared rows are
// padded by ${PAD} element(s) against bank conflicts on the column reads.
${HELPERS}
template <int VR, int VW>
static __device__ __forceinline__ void ptxf_transpose_tile(const ${E}* __restrict__ x, ${E}* __restrict__ y,
                                                           long long R, long long C, long long r0, long long c0,
                                                           ${E} (*tile)[${T} + ${PAD}])
{
    constexpr int NVR = ${T} / VR, RPR = ${THREADS} / NVR, PR = ${T} / RPR;  // phase 1: vectors per row, rows per pass, passes
    constexpr int NVW = ${T} / VW, RPW = ${THREADS} / NVW, PW = ${T} / RPW;  // phase 2: the same over y rows
    static_assert(${THREADS} % NVR == 0 && ${T} % RPR == 0 && ${THREADS} % NVW == 0 && ${T} % RPW == 0, "bad tiling");
    const int t = threadIdx.x;
    const int cr = (t % NVR) * VR, rr = t / NVR;  // phase 1: first tile column, first tile row
    const long long rows_left = R - (r0 + rr);     // rows of x from this thread's first (may be <= 0)
    const int nr = rows_left < ${T} ? (int)rows_left : ${T};
    const bool col_ok = c0 + cr < C;              // c0 + cr < C and C % VR == 0: the whole vector is in the row
    const ${E}* __restrict__ xp = x + ((r0 + rr) * C + c0 + cr);
    const long long xstep = (long long)RPR * C;
    ${E} buf[PR][VR];
#pragma unroll
    for (int p = 0; p < PR; ++p)
        if (col_ok && p * RPR < nr) ptxf_load(xp + p * xstep, buf[p]);
#pragma unroll
    for (int p = 0; p < PR; ++p) {
        if (col_ok && p * RPR < nr) {
#pragma unroll
            for (int j = 0; j < VR; ++j) tile[rr + p * RPR][cr + j] = buf[p][j];
        }
    }
    __syncthreads();
    const int rw = (t % NVW) * VW, cw = t / NVW;  // phase 2: first tile row (= y column), first tile column (= y row)
    const long long ycols_left = C - (c0 + cw);    // y rows from this thread's first
    const int nc = ycols_left < ${T} ? (int)ycols_left : ${T};
    const bool row_ok = r0 + rw < R;              // r0 + rw < R and R % VW == 0: the whole vector is in the y row
    ${E}* __restrict__ yp = y + ((c0 + cw) * R + r0 + rw);
    const long long ystep = (long long)RPW * R;
#pragma unroll
    for (int p = 0; p < PW; ++p) {
        if (row_ok && p * RPW < nc) {
            const int c = cw + p * RPW;
            ${E} e[VW];
#pragma unroll
            for (int j = 0; j < VW; ++j) e[j] = tile[rw + j][c];
            ptxf_store(yp + p * ystep, e);
        }
    }
}
}  // extern "C++"

// Launch: grid (${GRID},), block (${THREADS},), no dynamic shared memory (${SMEM} B static).
${LINKAGE}__global__ void __launch_bounds__(${THREADS}, ${MINB}) ${KERNEL}(${PARAMS})
{
    __shared__ ${E} ptxf_tile[${T}][${T} + ${PAD}];
    const long long ptxf_R = (long long)${R}, ptxf_C = (long long)${C};
    const long long ptxf_ntc_ = (ptxf_C + ${T} - 1) / ${T};
    const unsigned ptxf_ntc = ptxf_ntc_ > 0 ? (unsigned)ptxf_ntc_ : 1u;  // tiles per tile row
    const long long ptxf_r0 = (long long)(blockIdx.x / ptxf_ntc) * ${T}, ptxf_c0 = (long long)(blockIdx.x % ptxf_ntc) * ${T};
    const ${E}* ptxf_x = reinterpret_cast<const ${E}*>(${X});
    ${E}* ptxf_y = reinterpret_cast<${E}*>(${Y});
${DISPATCH}
}
""")


def _helpers(m: TransposeMatch, cfg: TransposeConfig) -> str:
    """Raw-word loads and stores of 1 and ``V`` elements (overloaded on the array length)."""
    es = _ITEMSIZE[m.dtype]
    e = _RAW[es]
    v = cfg.elems(m.dtype)
    out = [
        f"static __device__ __forceinline__ void ptxf_load(const {e}* __restrict__ p, {e} (&e)[1]) {{ e[0] = __ldg(p); }}",
        f"static __device__ __forceinline__ void ptxf_store({e}* __restrict__ p, const {e} (&e)[1]) {{ *p = e[0]; }}",
    ]
    if v > 1:
        vb = v * es
        vt, parts = _VT[vb], _PARTS[vb]
        per = 4 // es  # elements per 32-bit word
        if per == 1:
            unpack = [f"e[{i}] = {w};" for i, w in enumerate(parts)]
            words = [f"e[{i}]" for i in range(len(parts))]
        else:
            unpack = []
            for i, w in enumerate(parts):
                unpack += [f"e[{2 * i}] = (unsigned short)({w} & 0xffffu);", f"e[{2 * i + 1}] = (unsigned short)({w} >> 16);"]
            words = [f"((unsigned)e[{2 * i}] | ((unsigned)e[{2 * i + 1}] << 16))" for i in range(len(parts))]
        pack = words[0] if len(words) == 1 else f"make_{vt}({', '.join(words)})"
        out += [
            f"static __device__ __forceinline__ void ptxf_load(const {e}* __restrict__ p, {e} (&e)[{v}])\n{{\n"
            f"    const {vt} u = __ldg(reinterpret_cast<const {vt}*>(p));\n    " + "\n    ".join(unpack) + "\n}",
            f"static __device__ __forceinline__ void ptxf_store({e}* __restrict__ p, const {e} (&e)[{v}])\n{{\n"
            f"    *reinterpret_cast<{vt}*>(p) = {pack};\n}}",
        ]
    return "\n".join(out)


def _dispatch(m: TransposeMatch, cfg: TransposeConfig) -> str:
    v = cfg.elems(m.dtype)
    args = "ptxf_x, ptxf_y, ptxf_R, ptxf_C, ptxf_r0, ptxf_c0, ptxf_tile"
    if v == 1:
        return f"    ptxf_transpose_tile<1, 1>({args});"
    vb = v * _ITEMSIZE[m.dtype]
    return (
        f"    const bool ptxf_rv = ptxf_C % {v} == 0 && reinterpret_cast<unsigned long long>({m.x}) % {vb} == 0;  // vector reads\n"
        f"    const bool ptxf_wv = ptxf_R % {v} == 0 && reinterpret_cast<unsigned long long>({m.y}) % {vb} == 0;  // vector writes\n"
        f"    if (ptxf_rv && ptxf_wv) ptxf_transpose_tile<{v}, {v}>({args});\n"
        f"    else if (ptxf_rv) ptxf_transpose_tile<{v}, 1>({args});\n"
        f"    else if (ptxf_wv) ptxf_transpose_tile<1, {v}>({args});\n"
        f"    else ptxf_transpose_tile<1, 1>({args});"
    )


def render_kernel(ctx: GenContext, m: TransposeMatch, cfg: TransposeConfig) -> str:
    """The kernel text (helpers + ``__global__`` definition) for one configuration, in the user's signature.

    Raises ``ValueError`` for a configuration that leaves threads idle (see :meth:`TransposeConfig.valid`).
    """
    if not cfg.valid(m.dtype) or cfg.vec not in _VT or cfg.pad < 0:
        raise ValueError(f"bad transpose configuration {cfg} for {m.dtype}")
    params = []
    for p in ctx.kernel.params:
        const = "const " if p.is_const else ""
        params.append(f"{const}{p.type}* __restrict__ {p.name}" if p.is_pointer else f"{const}{p.type} {p.name}")
    linkage = 'extern "C" ' if re.match(r'extern\s+"C"\s*(?!\{)', ctx.kernel.text.lstrip()) else ""
    v = cfg.elems(m.dtype)
    body = _TEMPLATE.substitute(
        DTYPE=m.dtype, ES=_ITEMSIZE[m.dtype], E=_RAW[_ITEMSIZE[m.dtype]], T=cfg.tile, PAD=cfg.pad,
        THREADS=cfg.threads, V=v, VB=v * _ITEMSIZE[m.dtype], HELPERS=_helpers(m, cfg), MINB=cfg.min_blocks,
        GRID=grid_expr(m, cfg), SMEM=cfg.smem_bytes(m.dtype), LINKAGE=linkage, KERNEL=ctx.kernel.name,
        PARAMS=", ".join(params), R=m.r_arg, C=m.c_arg, X=m.x, Y=m.y, DISPATCH=_dispatch(m, cfg),
    )
    return 'extern "C++" {\n' + body
