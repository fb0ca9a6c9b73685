"""The "attention" family: an expert skeleton for attention forward, ``out = softmax(scale * q k^T [+ causal mask]) v``.

It applies to kernels whose spec reads three float buffers ``q``, ``k``, ``v`` and writes one ``out``, all of one shape
of rank 3 (``[BH, T, D]``) or 4 (``[B, H, T, D]`` or ``[B, T, H, D]``), whose head dimension ``D`` is one value in
:data:`HEAD_DIMS` at every check and bench size (a literal, or a size symbol that the sizes fix), with integer scalars
passing the size symbols, at most one float scalar (the scale), and ``launch.policy = "free"``. A naive attention
kernel (one thread per query, its scores, softmax and weighted sum of values over all keys) reads every key and value
once per query; the skeleton reads them once per block of queries (see ``attention.cu``): tiles of keys and values in
shared memory, each query's part of the head dimension and its output accumulator in registers, an online softmax.

A family cannot read the kernel's math: which buffer is the query, the layout of the two middle axes, the scale and
whether keys after the query are masked (causal) are read from names and the source where they show, else each
plausible variant is proposed, the likeliest first with its whole tuning space and the others with their first
configuration; the verifier rejects the variants that compute another function.

Knobs (``params``): ``block`` (threads: ``br * tpq``), ``br`` (queries a block), ``bc`` (keys a tile), ``tpq`` (threads
a query), ``layout`` ("bhtd" / "bthd"), ``causal`` (0/1), ``scale`` ("arg", "rsqrt_d", "one").
"""
from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from pathlib import Path

from ptxfactory.protocol import Candidate, KernelSpec
from ptxfactory.protocol.expr import ExprError, evaluate, to_c

from ..base import (EXP_CALL, GenContext, NoFit, family_candidate, family_candidates, fit_check, kernel_linkage,
                    render_params, scalars_unused, shape_dims, size_names, source_mentions)
from .cuda_text import load_template
from .rowwise import _CTYPE

_TEMPLATE = Path(__file__).with_name("attention.cu")
_LOAD = {"f32": "__ldg(p)", "f16": "__half2float(__ldg(p))", "bf16": "__bfloat162float(__ldg(p))"}
_STORE = {"f32": "v", "f16": "__float2half(v)", "bf16": "__float2bfloat16(v)"}
HEAD_DIMS = (16, 32, 64, 128)
SHARED_FLOATS = 4096  # a tile of keys and one of values: 2 * bc * D floats, at most 32 KiB of static shared memory
_ROLE_WORDS = (("q", r"^q|query"), ("k", r"^k|key"), ("v", r"^v|val"))


@dataclass(frozen=True)
class AttentionMatch:
    """How a spec maps onto attention: buffer names, the layout's C expressions and the head dimension."""

    q: str
    k: str
    v: str
    out: str
    dtype: str  # q, k, v
    out_dtype: str
    rank: int
    dims: tuple  # the shared shape's dimensions as the spec writes them
    d: int  # the head dimension
    names: tuple  # (size symbol, scalar argument) pairs
    scale_arg: str | None  # the float scalar, where there is one

    def c(self, expr) -> str:
        """A spec expression of the sizes in the kernel's scalars (C, ``long long``)."""
        return to_c(str(expr), dict(self.names))


@dataclass(frozen=True)
class Variant:
    """What the kernel computes, where the source does not say: the layout, the mask and the scale."""

    layout: str  # "bhtd": positions along the second last axis; "bthd": along the second (heads third)
    causal: bool
    scale: str  # "arg", "rsqrt_d", "one"


@dataclass(frozen=True)
class AttentionConfig:
    """One point of the tuning space: ``br`` queries a block, ``bc`` keys a tile, ``tpq`` threads a query, ``ch`` keys a
    chunk of the online softmax (one rescale of the accumulator a chunk)."""

    br: int
    bc: int
    tpq: int
    ch: int = 8

    @property
    def block(self) -> int:
        return self.br * self.tpq

    def params(self) -> dict:
        return {"block": self.block, "br": self.br, "bc": self.bc, "tpq": self.tpq}


def tuning_space(d: int) -> list[AttentionConfig]:
    """The configurations for head dimension ``d``: a thread a query where its part of q and of the accumulator fit
    (``d / tpq`` floats each), more threads a query for wider heads; tiles within :data:`SHARED_FLOATS`."""
    shapes = {16: ((64, 64, 1), (128, 64, 1)), 32: ((64, 64, 1), (128, 64, 1), (64, 64, 2)),
              64: ((64, 64, 2), (64, 64, 1), (128, 32, 2), (32, 64, 2)),
              128: ((64, 32, 2), (64, 32, 4), (128, 32, 4))}[d]
    return [AttentionConfig(br, bc, tpq) for br, bc, tpq in shapes if 2 * bc * d <= 2 * SHARED_FLOATS and (d // tpq) % 4 == 0]


@fit_check
def match_spec(spec: KernelSpec) -> AttentionMatch:
    """The attention mapping of ``spec`` (see the module docstring); raises :class:`NoFit` with the reason."""
    bufs = [a for a in spec.args if a.is_buffer]
    ins = [a for a in bufs if a.role == "in"]
    outs = [a for a in bufs if a.role == "out"]
    if len(ins) != 3 or len(outs) != 1 or len(bufs) != 4:
        raise NoFit(f"buffers: {len(ins)} inputs and {len(outs)} outputs of {len(bufs)}; it takes q, k, v and out")
    dims = shape_dims(ins[0].shape)
    if any(shape_dims(a.shape) != dims for a in bufs) or len(dims) not in (3, 4):
        raise NoFit("q, k, v and out are not one shape of rank 3 ([BH, T, D]) or 4 ([B, H, T, D] / [B, T, H, D])")
    if any(a.dtype.value not in _CTYPE for a in bufs) or len({a.dtype for a in ins}) != 1:
        raise NoFit("q, k and v are not one float dtype (f32, f16, bf16), or out is not a float")
    sizes = list(spec.check.sizes) + list(spec.bench.sizes)
    try:
        ds = {int(evaluate(str(dims[-1]), s)) for s in sizes}
    except ExprError as exc:
        raise NoFit(f"the head dimension {dims[-1]!r} cannot be evaluated: {exc}") from None
    if len(ds) != 1 or next(iter(ds)) not in HEAD_DIMS:
        raise NoFit(f"the head dimension takes {sorted(ds)} at the spec's sizes; the skeleton takes one of {HEAD_DIMS}")
    names = size_names(spec)
    floats = [a for a in spec.args if not a.is_buffer and a.dtype.value in ("f32", "f64")]
    if len(floats) > 1:
        raise NoFit(f"float scalars {', '.join(a.name for a in floats)}: the skeleton takes one (the scale)")
    for dim in dims[:-1]:
        try:
            to_c(str(dim), names)
        except ExprError as exc:
            raise NoFit(f"a dimension has no C form in the kernel's scalars: {exc}") from None
    q, k, v = _roles(ins)
    return AttentionMatch(q=q, k=k, v=v, out=outs[0].name, dtype=ins[0].dtype.value, out_dtype=outs[0].dtype.value,
                          rank=len(dims), dims=dims, d=next(iter(ds)), names=tuple(sorted(names.items())),
                          scale_arg=floats[0].name if floats else None)


def _roles(ins) -> tuple[str, str, str]:
    """(q, k, v) by their names where each is told apart (``query``, ``K``, ``value``...), else in signature order."""
    found = {}
    for role, pattern in _ROLE_WORDS:
        hits = [a.name for a in ins if re.search(pattern, a.name, re.I)]
        if len(hits) == 1:
            found[role] = hits[0]
    if len(set(found.values())) == 3:
        return found["q"], found["k"], found["v"]
    return tuple(a.name for a in ins)  # type: ignore[return-value]


def variants(m: AttentionMatch, text: str) -> list[tuple[Variant, bool]]:
    """The variants to propose, the likeliest first (``True``: the source shows it): the layouts the shape allows (the
    one whose position axis bounds a loop of the kernel first), causal where the source compares the key and query
    indices (else last), the scale from the float scalar, else ``1 / sqrt(D)`` where the source takes a square root,
    else none."""
    layouts = ["bhtd"] if m.rank == 3 else ["bhtd", "bthd"]
    if m.rank == 4 and _bounds_a_loop(m, text, m.dims[1]) and not _bounds_a_loop(m, text, m.dims[2]):
        layouts.reverse()
    scale = "arg" if m.scale_arg else "rsqrt_d" if re.search(r"\b(r?sqrtf?|__frsqrt_rn)\s*\(", text) else "one"
    causal_first = _causal_evidence(text)
    out = []
    for layout, causal in itertools.product(layouts, (causal_first, not causal_first)):
        out.append((Variant(layout, causal, scale), not out))
    return out


def _bounds_a_loop(m: AttentionMatch, text: str, dim) -> bool:
    """Whether a ``for`` loop of ``text`` runs up to the scalar that passes the size symbol ``dim``."""
    arg = dict(m.names).get(str(dim))
    return arg is not None and re.search(rf"\bfor\s*\([^;]*;[^;]*<=?\s*{re.escape(arg)}\s*;", text) is not None


def _causal_evidence(text: str) -> bool:
    """Whether the kernel masks keys after the query: ``causal`` named, a key loop up to the query (``j <= i``,
    ``j < i + 1``), or a comparison of two indices that selects ``-INFINITY``."""
    code = re.sub(r"//[^\n]*|/\*.*?\*/", " ", text, flags=re.S)
    return bool(re.search(r"causal", code, re.I)
                or re.search(r"\bfor\s*\([^;]*;\s*\w+\s*(<=\s*\w+|<\s*\w+\s*\+\s*1)\s*;", code)
                or re.search(r"\w+\s*[<>]=?\s*\w+\s*\)?\s*\?\s*-\s*(INFINITY|1e\d+|FLT_MAX)", code))


class AttentionFamily:
    """Expert attention-forward skeleton (tiles of keys and values in shared memory, online softmax)."""

    name = "attention"

    def _match(self, ctx: GenContext) -> tuple[AttentionMatch | None, str | None]:
        if not source_mentions(ctx.source, EXP_CALL):
            return None, "the source calls no exponential: not a softmax over keys"
        code = re.sub(r"//[^\n]*|/\*.*?\*/", " ", ctx.kernel.text, flags=re.S)
        if len(re.findall(r"\bfor\s*\(", code)) < 2 or not re.search(r"\+=|fmaf?\s*\(", code):
            return None, "no nested loops accumulating a sum (the dot products and the weighted sum over keys): not attention"
        m = match_spec(ctx.spec)
        if m is None:
            return None, match_spec.why(ctx.spec)
        if not scalars_unused(ctx.spec, ctx.kernel.text, set(dict(m.names).values()) | ({m.scale_arg} if m.scale_arg else set())):
            return None, "a scalar besides the sizes and the scale is part of the kernel's math"
        return m, None

    def why_not(self, ctx: GenContext) -> str | None:
        """Why the skeleton does not fit ``ctx``'s spec or source (None where it does)."""
        return self._match(ctx)[1]

    def propose(self, ctx: GenContext) -> list[Candidate]:
        m, _ = self._match(ctx)
        pairs = [] if m is None else [(var, cfg) for var, likely in variants(m, ctx.kernel.text)
                                      for cfg in (tuning_space(m.d) if likely else tuning_space(m.d)[:1])]
        return family_candidates(ctx, bool(pairs), pairs, lambda vc: self.instantiate(ctx, m, *vc))

    def instantiate(self, ctx: GenContext, m: AttentionMatch, var: Variant, cfg: AttentionConfig) -> Candidate:
        """The candidate for one variant and configuration."""
        seq, rows = _axes(m, var)
        grid = f"cdiv({seq}, {cfg.br}) * ({rows})"
        text = render_kernel(ctx, m, var, cfg)
        desc = (f"attention {var.layout}{' causal' if var.causal else ''} scale={var.scale} br={cfg.br} bc={cfg.bc} "
                f"tpq={cfg.tpq}")
        params = {**cfg.params(), "layout": var.layout, "causal": int(var.causal), "scale": var.scale}
        return family_candidate(ctx, self.name, text, grid, cfg.block, desc, params)


def _axes(m: AttentionMatch, var: Variant) -> tuple[str, str]:
    """The spec expressions of the positions (T) and of the rows (batch x heads) for a layout."""
    dims = [str(d) for d in m.dims]
    if m.rank == 3:
        return dims[1], dims[0]
    if var.layout == "bhtd":
        return dims[2], f"({dims[0]}) * ({dims[1]})"
    return dims[1], f"({dims[0]}) * ({dims[2]})"


def render_kernel(ctx: GenContext, m: AttentionMatch, var: Variant, cfg: AttentionConfig) -> str:
    """The kernel text (helpers + ``__global__`` definition) for one variant and configuration, in the user's signature."""
    dims = [str(x) for x in m.dims]
    seq = m.c(_axes(m, var)[0])
    if m.rank == 4 and var.layout == "bthd":
        heads = m.c(dims[2])
        tstride = f"ptxf_heads * {m.d}"
        base = f"(ptxf_bh / ptxf_heads) * ptxf_t * ptxf_heads * {m.d} + (ptxf_bh % ptxf_heads) * {m.d}"
    else:
        heads = "1"
        tstride = str(m.d)
        base = f"ptxf_bh * ptxf_t * {m.d}"
    scale = {"arg": f"(float)({m.scale_arg})", "rsqrt_d": f"{1.0 / math.sqrt(m.d)!r}f", "one": "1.0f"}[var.scale]
    body = load_template(_TEMPLATE).substitute(
        D=m.d, BR=cfg.br, BC=cfg.bc, TPQ=cfg.tpq, CH=cfg.ch, T=_CTYPE[m.dtype], TO=_CTYPE[m.out_dtype],
        LOAD=_LOAD[m.dtype], STORE=_STORE[m.out_dtype], LINKAGE=kernel_linkage(ctx.kernel), KERNEL=ctx.kernel.name,
        PARAMS=render_params(ctx.kernel), SEQ=seq, HEADS=heads, TSTRIDE=tstride, BASE=base, SCALE=scale,
        CAUSAL="true" if var.causal else "false", Q=m.q, K=m.k, V=m.v, O=m.out,
    )
    launch = f"// Launch: grid (cdiv(T, {cfg.br}) x rows,), block ({cfg.block},), no dynamic shared memory.\n"
    return launch + body
