"""The "elementwise" family: an expert skeleton for ``y[R, C] = act(x[R, C] + b[C])`` (bias optional).

It applies to kernels whose spec reads ``x[R, C]`` (bf16, f16 or f32) and optionally ``b[C]`` (any of
those dtypes), writes ``y[R, C]`` of x's dtype, and takes exactly two integer scalars equal to ``R``
and ``C``, with ``launch.policy = "free"``. A family cannot read the user's math, so it carries a
small epilogue library (``gelu_tanh``, ``gelu_erf``, ``silu``, ``relu``, ``identity``) and proposes
each; the verifier rejects the instances that compute another function, and the lesson store
records which epilogue fits which kernel.

Each candidate is the CUDA template ``elementwise.cu`` instantiated with the user's kernel name,
parameter names, types and order, so its ``kernel_text`` drops into their file in place of the
original kernel. Kernel design (see ``elementwise.cu``): 2-D indexing (row group, column chunk) in
a 1-D grid, so no thread divides by ``C`` per element; ``vec``-byte vector loads and stores with
``unroll`` rows per thread in flight; b loaded by vector once per thread and reused for every row;
a per-row head/tail path for odd ``C`` and a scalar path for pointers misaligned against each other.

Knobs (``params``): ``block`` (threads), ``vec`` (bytes per vector access: 4, 8 or 16), ``unroll``
(rows, i.e. vectors, per thread), ``hint`` ("ldg": x through the read-only path, plain stores;
"stream": evict-first loads of x and stores of y), ``epilogue``, and for ``gelu_tanh`` only ``tanh``
("precise": ``tanhf``; "approx": ``tanh.approx.f32`` through inline PTX, sm_75 and later, relative
error about 2^-11 per the PTX ISA, saturated to exactly +-1 for |u| >= 9, where 1 - tanh(u) < 3.1e-8
is below one fp32 ulp of 1). The bias_gelu spec's tolerance (atol = rtol = 1e-2) covers the
approximation: |y error| <= 0.5 |v| 2^-11 < 1.3e-3 where tanh is not saturated (|v| < 5.2).
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from pathlib import Path

from ptxfactory.protocol import Candidate, KernelSpec

from ..base import (square_note, GenContext, NoFit, family_candidate, family_candidates, fit_check, shape_dims, size_args,
                    source_mentions)
from .cuda_text import load_template, floats_to_word, word_to_floats

_TEMPLATE = Path(__file__).with_name("elementwise.cu")
_FLOATS = ("bf16", "f16", "f32")
_CTYPE = {"bf16": "__nv_bfloat16", "f16": "__half", "f32": "float"}
_ITEMSIZE = {"bf16": 2, "f16": 2, "f32": 4}
_VT = {4: "unsigned", 8: "uint2", 16: "uint4"}
_WORDS = {4: ["u"], 8: ["u.x", "u.y"], 16: ["u.x", "u.y", "u.z", "u.w"]}
_ZERO = {4: "0u", 8: "make_uint2(0u, 0u)", 16: "make_uint4(0u, 0u, 0u, 0u)"}

EPILOGUES = ("gelu_tanh", "gelu_erf", "silu", "relu", "identity")
# what the source must show for an epilogue's configurations to be proposed: the function it computes with (a tanh,
# an erf, an exponential or a sigmoid, a max or a conditional choice)
EVIDENCE = {"gelu_tanh": r"\btanh", "gelu_erf": r"\berf", "silu": r"\bexpf?\b|__expf|\bsigmoid|\bsilu|\bswish",
            "relu": r"\bfmaxf?\s*\(|\bmax\s*\(|\?|\brelu"}
# a loop other than a grid-stride one (gridDim in the kernel) whose bound is not a literal: the kernel is not one
# element per iteration of the grid, so an identity (bias add) epilogue would be another function (a row cumsum is
# not a copy); and a scalar accumulated in a loop (s += ..., m = fmaxf(m, ...)): a reduction, no epilogue at all (a
# row softmax calls expf and fmaxf but is no SiLU or ReLU), while a row loop that maps each element keeps them
_WHILE = re.compile(r"\bwhile\s*\(|\bdo\s*\{")
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_FOR = re.compile(r"\bfor\s*\(([^;]*);([^;]*);([^)]*)\)")
_NAME = re.compile(r"[A-Za-z_]\w*")
_LITERAL = re.compile(r"\b\d[\w.]*")
_ACCUMULATE = re.compile(r"(?<![\w\].])\s*\b(\w+)\s*(?:[-+*]=|=\s*(?:fmaxf?|fminf?|max|min)\s*\(\s*\1\b|=\s*\1\s*[-+*])")


def _data_loop(kernel_text: str) -> bool:
    """Whether the kernel has a loop that is not a grid-stride loop and not bounded by literals alone."""
    kernel_text = _COMMENT.sub(" ", kernel_text)
    if "gridDim" in kernel_text:
        return False
    if _WHILE.search(kernel_text):
        return True
    for init, cond, _ in _FOR.findall(kernel_text):
        var = _NAME.findall(init.split("=")[0])[-1:]
        if set(_NAME.findall(_LITERAL.sub(" ", cond))) - set(var):
            return True
    return False


def _accumulates(kernel_text: str) -> bool:
    """Whether a loop of the kernel carries a scalar (``s += ...``, ``m = fmaxf(m, ...)``): a reduction."""
    text = _COMMENT.sub(" ", kernel_text)
    if not (_FOR.search(text) or _WHILE.search(text)):
        return False
    return bool(_ACCUMULATE.search(_FOR.sub(" ", text)))


def plausible(epilogue: str, source: str, kernel_text: str = "") -> bool:
    """Whether ``source`` (the translation unit; ``kernel_text``, the kernel's definition) shows what ``epilogue``
    computes with (:data:`EVIDENCE`): the family proposes no tanh-GELU for a kernel that never calls ``tanh``, no
    identity epilogue for a kernel with a loop of its own (that is not a grid-stride loop), and no epilogue at all
    for a kernel whose loop accumulates a scalar (a reduction, a row softmax)."""
    if _accumulates(kernel_text):
        return False
    if epilogue == "identity":  # a bias add or a copy: no activation's function in the kernel or the helpers it calls
        shown = kernel_text + "\n" + source
        return not _data_loop(kernel_text) and not any(source_mentions(shown, p) for p in EVIDENCE.values())
    pattern = EVIDENCE.get(epilogue)
    return pattern is None or source_mentions(source, pattern)


def other_element_read(kernel_text: str, x: str, y: str) -> str | None:
    """Why the kernel is no map of ``x``'s element onto ``y``'s at the same index (the skeleton's ``y[i] = act(x[i] +
    b[c])``), or None: where every store ``y[E] = ...`` and every read ``x[F]`` are plain subscripts, each ``F`` must be
    one of the ``E`` (compared without whitespace); a flip (``x[r * C + (C - 1 - c)]``), a shift or a stencil reads
    another element. A kernel the check cannot read (``x`` or ``y`` used otherwise: a pointer offset, a load
    intrinsic, a vector cast) is not refused here."""
    from .transform import syntax as sx
    fn = sx.kernel_function(sx.parse(kernel_text.encode()).root_node)
    body = fn.child_by_field_name("body") if fn is not None else None
    if body is None:
        return None
    stores, reads = set(), []
    for n in sx.walk(body):
        if n.type != "identifier" or sx.text(n) not in (x, y) or n.parent is None:
            continue
        sub = n.parent
        if sub.type != "subscript_expression" or sub.child_by_field_name("argument") != n:
            return None  # used otherwise: not read here
        index = sx.subscript_index(sub)
        if index is None:
            return None
        up = sub.parent
        while up is not None and up.type == "parenthesized_expression":
            up = up.parent
        store = up is not None and up.type == "assignment_expression" and sx.unparen(up.child_by_field_name("left")) == sub
        if sx.text(n) == y and store:
            stores.add(sx.compact(index))
        elif sx.text(n) == x and not store:
            reads.append(index)
        else:
            return None
    other = next((r for r in reads if sx.compact(r) not in stores), None)
    if stores and other is not None:
        return (f"it reads {x}[{sx.compact(other)}], another element than the one it writes "
                f"({y}[{', '.join(sorted(stores))}]): no map of x[i] onto y[i]")
    return None


@dataclass(frozen=True)
class ElementwiseMatch:
    """How a spec maps onto ``y[R, C] = act(x[R, C] + b[C])``: argument names, size symbols, dtypes."""

    x: str
    b: str | None
    y: str
    r_arg: str
    c_arg: str
    r_sym: str
    c_sym: str
    dtype: str  # x and y
    b_dtype: str | None


@dataclass(frozen=True)
class ElementwiseConfig:
    """One point of the tuning space.

    ``block`` threads per block (a multiple of 32: each warp owns rows, its 32 lanes a column chunk);
    ``vec`` bytes per vector access (4, 8 or 16); ``unroll`` rows per thread, one vector each, all
    loaded before any is stored; ``hint`` "ldg" or "stream"; ``epilogue`` one of :data:`EPILOGUES`;
    ``tanh`` "precise" or "approx" (used by ``gelu_tanh`` only, None otherwise).
    """

    block: int
    vec: int
    unroll: int
    hint: str
    epilogue: str
    tanh: str | None = None

    @property
    def warps(self) -> int:
        return self.block // 32

    @property
    def rows_per_block(self) -> int:
        """Rows of one block: ``block / 32`` warps x ``unroll`` rows per warp."""
        return self.warps * self.unroll

    @property
    def min_blocks(self) -> int:
        """Blocks per SM promised to ptxas (``__launch_bounds__`` 2nd argument): caps registers at 64."""
        return max(1, 1024 // self.block)

    def params(self) -> dict:
        out = {"epilogue": self.epilogue, "block": self.block, "vec": self.vec, "unroll": self.unroll, "hint": self.hint}
        if self.tanh is not None:
            out["tanh"] = self.tanh
            out["math"] = "fast" if self.tanh == "approx" else "precise"  # the knob shared by every generator
        return out


def chunk_elems(m: ElementwiseMatch, cfg: ElementwiseConfig) -> int:
    """Columns per column chunk: 32 lanes x ``vec / itemsize`` elements."""
    return 32 * (cfg.vec // _ITEMSIZE[m.dtype])


def grid_expr(m: ElementwiseMatch, cfg: ElementwiseConfig) -> str:
    """``cdiv(R, rows_per_block) * cdiv(C, chunk)``: one block per (row group, column chunk); the kernel splits blockIdx.x the same way."""
    return f"cdiv({m.r_sym}, {cfg.rows_per_block}) * cdiv({m.c_sym}, {chunk_elems(m, cfg)})"


@fit_check
def match_spec(spec: KernelSpec) -> ElementwiseMatch | None:
    """The elementwise mapping of ``spec``, or None when the spec does not have the pattern (or its launch is fixed)."""
    syms = set(spec.symbols)
    bufs = [a for a in spec.args if a.is_buffer]
    scalars = [a for a in spec.args if not a.is_buffer]
    outs = [a for a in bufs if a.role != "in"]
    ins = [a for a in bufs if a.role == "in"]
    if len(outs) != 1 or outs[0].role != "out" or not _is_2d(outs[0].shape, syms):
        raise NoFit(f"written buffers: {len(outs)}; it writes one out buffer y[R, C] (R and C two symbols)"
                    if len(outs) != 1 else f"the written buffer {outs[0].name} is not an out y[R, C]" + square_note(outs))
    y = outs[0]
    r_sym, c_sym = (d.strip() for d in y.shape)
    xs = [a for a in ins if list(shape_dims(a.shape)) == [r_sym, c_sym]]
    if len(xs) != 1 or xs[0].dtype != y.dtype or y.dtype.value not in _FLOATS:
        raise NoFit(f"inputs of {y.name}'s shape: {len(xs)}; it takes one x of its float dtype" if len(xs) != 1
                    else f"x ({xs[0].name}, {xs[0].dtype.value}) and y ({y.dtype.value}) are not one float dtype")
    x = xs[0]
    bs = [a for a in ins if a is not x]
    if len(bs) > 1 or any(list(shape_dims(a.shape)) != [c_sym] or a.dtype.value not in _FLOATS for a in bs):
        raise NoFit(f"inputs besides x and one float bias [{c_sym}]: " + ", ".join(a.name for a in bs))
    b = bs[0] if bs else None
    sizes = size_args(scalars, r_sym, c_sym)
    if len(scalars) != 2 or sizes is None:
        raise NoFit(f"scalars other than two integers equal to {r_sym} and {c_sym}")
    r_arg, c_arg = sizes
    return ElementwiseMatch(
        x=x.name, b=b.name if b else None, y=y.name, r_arg=r_arg.name, c_arg=c_arg.name,
        r_sym=r_sym, c_sym=c_sym, dtype=x.dtype.value, b_dtype=b.dtype.value if b else None,
    )


def _is_2d(shape, syms: set[str]) -> bool:
    d = shape_dims(shape)
    return len(d) == 2 and all(isinstance(s, str) and s in syms for s in d) and d[0] != d[1]


def _arch_number(arch: str) -> int:
    m = re.fullmatch(r"sm_(\d+)a?", arch)
    return int(m.group(1)) if m else 0


def tuning_space(spec: KernelSpec) -> list[ElementwiseConfig]:
    """The configurations in product order, for each epilogue of :data:`EPILOGUES` the same space: one at 8-byte
    vectors, then 16-byte vectors over blocks of 256 and 512, 2 and 4 rows a thread, the ``ldg`` and ``stream`` hints
    (9 configurations; ``gelu_tanh`` in both tanh forms: 18). The source's evidence keeps one or two epilogues
    (:func:`plausible`), so a kernel gets about 9-18.

    ``tanh = "approx"`` needs ``tanh.approx.f32`` (sm_75 and later); on older archs only "precise" is proposed.
    """
    tanhs = ("precise", "approx") if _arch_number(spec.arch) >= 75 else ("precise",)
    out = []
    for e in EPILOGUES:
        forms = tanhs if e == "gelu_tanh" else (None,)
        out += [ElementwiseConfig(256, 8, 4, "ldg", e, t) for t in forms]
        out += [ElementwiseConfig(block, 16, unroll, hint, e, t)
                for block, unroll, hint, t in itertools.product((256, 512), (2, 4), ("ldg", "stream"), forms)]
    return out


class ElementwiseFamily:
    """Expert elementwise/broadcast skeleton with a fused epilogue: 9 instances an epilogue the source shows (18 for a
    tanh-GELU, both tanh forms)."""

    name = "elementwise"

    def _configs(self, ctx: GenContext) -> tuple[ElementwiseMatch | None, list[ElementwiseConfig]]:
        m = match_spec(ctx.spec)
        return m, [c for c in tuning_space(ctx.spec) if plausible(c.epilogue, ctx.source, ctx.kernel.text)] if m else []

    def why_not(self, ctx: GenContext) -> str | None:
        """Why the skeleton does not fit ``ctx``'s spec or source (None where it does; what no family takes, a template
        or a signature unlike the spec, is :func:`~ptxfactory.search.base.kernel_refusal`'s)."""
        m, configs = self._configs(ctx)
        if m is None:
            return match_spec.why(ctx.spec)
        other = other_element_read(ctx.kernel.text, m.x, m.y)
        if other is not None:
            return other
        if not configs:
            return "the source computes none of its epilogues (" + ", ".join(EPILOGUES) + ")"
        return None

    def propose(self, ctx: GenContext) -> list[Candidate]:
        m, configs = self._configs(ctx)
        if m is not None and other_element_read(ctx.kernel.text, m.x, m.y) is not None:
            configs = []
        return family_candidates(ctx, m is not None, configs, lambda cfg: self.instantiate(ctx, m, cfg))

    def instantiate(self, ctx: GenContext, m: ElementwiseMatch, cfg: ElementwiseConfig) -> Candidate:
        """The candidate for one configuration (the spec must match: ``m = match_spec(ctx.spec)``)."""
        text = render_kernel(ctx, m, cfg)
        act = cfg.epilogue + (f"({cfg.tanh})" if cfg.tanh else "")
        desc = (
            f"elementwise {act} block={cfg.block} vec={cfg.vec}B unroll={cfg.unroll} "
            f"rows/block={cfg.rows_per_block} {cfg.hint}"
        )
        return family_candidate(ctx, self.name, text, grid_expr(m, cfg), cfg.block, desc, cfg.params())



_GELU_K = "0.7978845608f"  # sqrt(2 / pi), as in the usual tanh form of GELU
_TANH_APPROX = """static __device__ __forceinline__ float ptxf_tanh_approx(float u)
{
    float t;
    asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(u));
    return fabsf(u) < 9.f ? t : copysignf(1.f, u);  // exact saturation: tanhf(9) = 1 - 3e-8
}
"""


def _act(cfg: ElementwiseConfig) -> tuple[str, str, str]:
    """(C body of ``ptxf_act(float v)``, extra helpers, a human name) for the configuration's epilogue."""
    if cfg.epilogue == "gelu_tanh":
        tanh = "ptxf_tanh_approx(u)" if cfg.tanh == "approx" else "tanhf(u)"
        body = f"    const float u = {_GELU_K} * (v + 0.044715f * v * v * v);\n    return 0.5f * v * (1.0f + {tanh});"
        name = f"0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3))), tanh {cfg.tanh}"
        return body, _TANH_APPROX if cfg.tanh == "approx" else "", name
    if cfg.epilogue == "gelu_erf":
        return "    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));", "", "0.5 v (1 + erf(v / sqrt(2)))"
    if cfg.epilogue == "silu":
        return "    return v / (1.0f + expf(-v));", "", "v / (1 + exp(-v))"
    if cfg.epilogue == "relu":
        return "    return fmaxf(v, 0.0f);", "", "max(v, 0)"
    if cfg.epilogue == "identity":
        return "    return v;", "", "v"
    raise ValueError(f"unknown epilogue {cfg.epilogue!r} (known: {', '.join(EPILOGUES)})")




def _helpers(m: ElementwiseMatch, cfg: ElementwiseConfig, extra: str) -> str:
    """Dtype- and width-specific helpers: conversions, vector zero/unpack/pack, the plain store."""
    tx, tb = _CTYPE[m.dtype], _CTYPE[m.b_dtype or m.dtype]
    vt, words = _VT[cfg.vec], _WORDS[cfg.vec]
    epw = 4 // _ITEMSIZE[m.dtype]
    epv = cfg.vec // _ITEMSIZE[m.dtype]
    to_f = {"bf16": "__bfloat162float(v)", "f16": "__half2float(v)", "f32": "v"}
    from_f = {"bf16": "__float2bfloat16(f)", "f16": "__float2half(f)", "f32": "f"}[m.dtype]
    unpack = "\n".join(
        f"    f[{j * epw + k}] = {e};" for j, w in enumerate(words) for k, e in enumerate(word_to_floats(m.dtype, w))
    )
    packed = [floats_to_word(m.dtype, [f"f[{j * epw + k}]" for k in range(epw)]) for j in range(len(words))]
    pack = packed[0] if len(words) == 1 else f"make_{vt}({', '.join(packed)})"
    return f"""
static __device__ __forceinline__ float ptxf_x2f({tx} v) {{ return {to_f[m.dtype]}; }}
static __device__ __forceinline__ {tx} ptxf_f2x(float f) {{ return {from_f}; }}
static __device__ __forceinline__ float ptxf_b2f({tb} v) {{ return {to_f[m.b_dtype or m.dtype]}; }}
static __device__ __forceinline__ {vt} ptxf_vzero() {{ return {_ZERO[cfg.vec]}; }}
static __device__ __forceinline__ void ptxf_st({vt}* p, {vt} v) {{ *p = v; }}
// {cfg.vec} bytes of {m.dtype} <-> {epv} floats (element 0 at the lowest address)
static __device__ __forceinline__ void ptxf_unpack(const {vt} u, float (&f)[{epv}])
{{
{unpack}
}}
static __device__ __forceinline__ {vt} ptxf_pack(const float (&f)[{epv}])
{{
    return {pack};
}}
{extra}"""


def render_kernel(ctx: GenContext, m: ElementwiseMatch, cfg: ElementwiseConfig) -> str:
    """The kernel text (helpers + ``__global__`` definition) for one configuration, in the user's signature."""
    if cfg.vec not in _VT or cfg.vec < _ITEMSIZE[m.dtype] or cfg.block % 32 or cfg.unroll < 1:
        raise ValueError(f"bad elementwise configuration {cfg} for {m.dtype}")
    tx = _CTYPE[m.dtype]
    tb = _CTYPE[m.b_dtype or m.dtype]
    epv = cfg.vec // _ITEMSIZE[m.dtype]
    act, extra, act_name = _act(cfg)
    params = []
    for p in ctx.kernel.params:
        const = "const " if p.is_const else ""
        params.append(f"{const}{p.type}* __restrict__ {p.name}" if p.is_pointer else f"{const}{p.type} {p.name}")
    same_b = m.b is not None and m.b_dtype == m.dtype
    load_b = (
        f"            const {_VT[cfg.vec]} q = __ldg(reinterpret_cast<const {_VT[cfg.vec]}*>(b) + v);\n"
        "            ptxf_unpack(q, bf);"
    ) if same_b else ""
    linkage = 'extern "C" ' if re.match(r'extern\s+"C"\s*(?!\{)', ctx.kernel.text.lstrip()) else ""
    body = load_template(_TEMPLATE).substitute(
        HELPERS=_helpers(m, cfg, extra), ACT=act, ACT_NAME=act_name,
        TX=tx, TB=tb, VT=_VT[cfg.vec], VB=cfg.vec, EPV=epv, UNROLL=cfg.unroll, WARPS=cfg.warps,
        RPB=cfg.rows_per_block, BLOCK=cfg.block, MINB=cfg.min_blocks,
        HAS_B="true" if m.b else "false", LOAD_B_VEC=load_b,
        LOAD_X="__ldcs" if cfg.hint == "stream" else "__ldg",
        STORE_Y="__stcs" if cfg.hint == "stream" else "ptxf_st",
        LINKAGE=linkage, KERNEL=ctx.kernel.name, PARAMS=", ".join(params),
        X=m.x, Y=m.y, R=m.r_arg, C=m.c_arg,
        B=m.b if m.b else f"static_cast<const {tx}*>(nullptr)",
        BVEC=f"(reinterpret_cast<unsigned long long>({m.b}) % {cfg.vec} == 0)" if same_b else "false",
    )
    # The helpers get C++ linkage even when the kernel sits in an extern "C" block.
    head, sep, kernel = body.rpartition(f"{linkage}__global__ void __launch_bounds__")
    launch = (
        f"// Launch: grid ({grid_expr(m, cfg)},), block ({cfg.block},), no dynamic shared memory.\n"
    )
    return f'extern "C++" {{\n{head.rstrip()}\n}}  // extern "C++"\n\n{launch}{sep}{kernel}'
