"""The "rowwise" family: an expert skeleton for row-wise normalisation (RMSNorm, LayerNorm).

It applies to kernels whose spec reads ``x[R, C]`` (bf16, f16 or f32), optionally ``w[C]`` and then
``b[C]`` (in signature order: the weight, then the bias, added after scaling), writes ``y[R, C]`` (any
float dtype), and takes scalars equal to ``R``, to ``C`` and a constant float ``eps`` (other scalars are
passed through unused), with ``launch.policy = "free"``. The common variants of the class are taken too
(:func:`match_spec`, :func:`variants`): up to two per-row outputs ``[R]`` (mean, rstd, var, std, rms: the
statistic the source's stores show, else each plausible one; stored by one thread per row), and a residual
``res[R, C]`` added to x before the normalisation where the source adds them, its sum stored to a second
``[R, C]`` output or to the residual itself when it is ``inout``. A spec with a bias is LayerNorm (``y = (x - mean) * rstd * w + b``):
every candidate is then a LayerNorm; without one, the candidates are RMSNorm plus two LayerNorm
probes. Each candidate is the CUDA template ``rowwise.cu`` instantiated
with the user's kernel name, parameter names, types and order, so its ``kernel_text`` drops into
their file in place of the original kernel.

Kernel design (see ``rowwise.cu``): 16-byte vector loads/stores when ``C`` is a multiple of the
vector width and the pointers are 16-byte aligned (a scalar path otherwise); ``MV`` vectors per
thread cached in registers between the reduction and the write (longer rows re-read the rest);
fp32 accumulation; warp shuffles plus shared memory across the warps of one row; LayerNorm's
variance as a second pass over the register-cached row (squared deviations from the mean, no
``E[x^2] - mean^2`` cancellation). From sm_80 the cache may be staged instead (dynamic shared memory filled by
``cp.async``, sized at launch from the row length: registers no longer follow the longest row; a thread with at
most ``STAGE_REGS`` vectors keeps them in registers). From sm_90 a row longer than one block's cache is split over
S blocks of a thread block cluster, S the fewest that hold it, their sums pushed into each other's shared memory
(st.async counted on mbarriers). A candidate fixes
the block size, rows per block (for short rows) and register cache; the threads per row are chosen
at run time from ``C`` among the powers of two between ``block / rows_per_block`` (at least 32)
and ``block``: the fewest threads whose register cache holds the row. With ``grid = "adaptive"``
the rows per block shrink as the threads per row grow, so the grid is the piecewise expression
``cdiv(R, rows_per_block(C))`` (only ``min``/``max``/``cdiv``, as protocol.expr allows); with
``grid = "fixed"`` it is ``cdiv(R, rows_per_block)`` and long rows are taken in several steps.
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, replace
from pathlib import Path

from ptxfactory.protocol import Candidate, KernelSpec

from ..base import (square_note, _COMMENTS, GenContext, NoFit, family_candidate, family_candidates, fit_check, kernel_linkage,
                    render_params, scalars_unused, shape_dims, size_args, stored_values)
from .cuda_text import load_template, floats_to_word, word_to_floats
from ptxfactory.harness.occupancy import occupancy
from ptxfactory.harness.static_checks import MAX_CLUSTER_BLOCKS, PORTABLE_CLUSTER_BLOCKS, REGISTERS_PER_SM
from .transform.grid_stride import MAX_THREADS_PER_SM as THREADS_PER_SM  # resident threads an SM holds (sm_80, sm_90)

_TEMPLATE = Path(__file__).with_name("rowwise.cu")
_FLOATS = ("bf16", "f16", "f32")
_CTYPE = {"bf16": "__nv_bfloat16", "f16": "__half", "f32": "float"}
_ITEMSIZE = {"bf16": 2, "f16": 2, "f32": 4}


@dataclass(frozen=True)
class RowwiseMatch:
    """How a spec maps onto the row-wise pattern: argument names, size symbols and dtypes.

    The variants of the class, each optional: ``y_dtype`` other than x's; ``res`` a second input of
    x's shape and dtype added to x first (``h = x + res``, fp32), with ``h_out`` an output of x's shape
    receiving ``h`` (or ``res`` itself when it is ``inout``); ``stats`` per-row outputs ``[R]``, each
    ``(name, dtype, statistic)`` in signature order, the statistic one of :data:`STATS` or ``""`` until
    :func:`variants` assigns it; scalars other than R, C and eps passed through unused."""

    x: str
    w: str | None
    y: str
    r_arg: str
    c_arg: str
    eps_arg: str
    r_sym: str
    c_sym: str
    dtype: str  # x (and res)
    w_dtype: str | None
    c_dtype: str  # dtype of the C scalar (index type)
    b: str | None = None  # the bias (LayerNorm), after the weight in signature order
    b_dtype: str | None = None
    y_dtype: str = ""  # "" : x's dtype
    res: str | None = None
    res_inout: bool = False  # res also receives h
    h_out: str | None = None
    h_dtype: str | None = None
    stats: tuple[tuple[str, str, str], ...] = ()

    @property
    def out_dtype(self) -> str:
        return self.y_dtype or self.dtype

    @property
    def h(self) -> str | None:
        """The buffer that receives ``x + res``, if any."""
        return self.res if self.res_inout else self.h_out

    @property
    def vec(self) -> int:
        """Elements per 16-byte vector of x/y."""
        return 16 // _ITEMSIZE[self.dtype]


MIN_TPR = 8  # the fewest threads per row: a quarter warp


@dataclass(frozen=True)
class RowwiseConfig:
    """One point of the tuning space.

    ``block`` threads per block; ``rows_per_block`` rows per block for the shortest rows (the
    smallest threads-per-row tier); ``vecs`` 16-byte vectors of x cached per thread; ``hint``
    "ldg" (x through the read-only path) or "stream" (evict-first loads of x, stores of y);
    ``grid`` "adaptive" (rows per block halve as threads per row double, so one block always
    holds ``block`` threads' worth of rows: the grid expression is piecewise in C) or "fixed"
    (``rows_per_block`` at every row length, longer rows taken in several steps: grid
    ``cdiv(R, rows_per_block)``); ``norm`` "rms" or "layer"; ``cluster`` > 1 (sm_90+): the kernel is
    compiled for thread block clusters of that many blocks, and a row longer than one block's register
    cache (``block * vecs`` vectors) is split over the blocks of a cluster (:func:`grid_expr_cluster`);
    ``stage`` (sm_80+): the cache is dynamic shared memory filled by ``cp.async``, sized at launch from the row
    length (:func:`stage_bytes_expr`), so its size costs no registers; ``wpre``: the weight's (and bias's) vectors of a
    thread's cache (staged: every one it may cache) are read into registers once, before the first row's loads of x;
    ``full``: the launch bounds ask for a full SM of threads (:data:`THREADS_PER_SM`), 32 registers a thread;
    ``persist`` > 0 (register caches, no cluster): pipelined, a persistent grid of at most that many blocks (the GPU's
    SM count times the blocks an SM holds at the launch bounds, :func:`pipe_configs`), each block taking a group of
    ``block / tpr`` rows at a time and its threads loading the next group's row before this one's reduction.
    """

    block: int
    rows_per_block: int
    vecs: int
    hint: str = "ldg"
    grid: str = "adaptive"
    norm: str = "rms"
    cluster: int = 1
    stage: bool = False
    wpre: bool = False
    full: bool = False
    persist: int = 0

    @property
    def min_blocks(self) -> int:
        """Blocks per SM promised to ptxas (``__launch_bounds__`` 2nd argument): caps registers at 64 (128 for a
        16-vector register cache; a staged cache holds no registers; ``full``: 32, every thread of an SM resident;
        pipelined: :data:`PIPE_REGISTERS`)."""
        if self.full:
            return max(1, THREADS_PER_SM // self.block)
        if self.persist:
            return max(1, REGISTERS_PER_SM // (self.block * PIPE_REGISTERS[min(self.vecs, len(PIPE_REGISTERS)) - 1]))
        return max(1, REGISTERS_PER_SM // (self.block * (128 if self.vecs > 8 and not self.stage else 64)))

    def tiers(self, vec: int) -> list[tuple[int, int, int]]:
        """``(threads_per_row, rows_per_block, max_C)`` per tier, smallest rows first (the last tier has no limit).

        Threads per row: powers of two from ``max(MIN_TPR, block / rows_per_block)`` to ``block`` (below a warp, a
        warp holds several rows: more of each thread's row in flight at once on short rows); a row
        of ``C`` elements takes the first tier whose register cache (``tpr * vecs * vec``) holds it.
        """
        tpr, out = max(MIN_TPR, self.block // self.rows_per_block), []
        rpb = self.rows_per_block
        while tpr <= self.block:
            out.append((tpr, rpb, tpr * self.vecs * vec))
            tpr *= 2
            if self.grid == "adaptive":
                rpb = max(1, rpb // 2)
        return out

    def params(self) -> dict:
        out = {
            "norm": self.norm, "block": self.block, "rows_per_block": self.rows_per_block,
            "vecs": self.vecs, "hint": self.hint, "grid": self.grid,
        }
        if self.cluster > 1:
            out["cluster"] = self.cluster
        if self.stage:
            out["stage"] = "smem"
        if self.wpre:
            out["wpre"] = True
        if self.full:
            out["occupancy"] = "full"
        if self.persist:
            out["persist"] = self.persist
        return out


def piecewise_expr(pieces: list[tuple[int, int | None]], c_sym: str) -> str:
    """``value_i`` for the first piece whose cap holds ``c_sym`` (``c_sym <= cap_i``; the last piece's cap is
    ignored), as an expression of ``min``/``max`` (protocol.expr has no conditional): the kernel's dispatch."""
    expr = str(pieces[-1][0])
    for (value, cap), (nxt, _) in zip(pieces, pieces[1:]):
        if value != nxt:  # + (value - nxt) when c_sym <= cap
            expr += f" {'+' if value > nxt else '-'} {abs(value - nxt)} * min(1, max(0, {cap + 1} - {c_sym}))"
    return expr


def rows_per_block_expr(tiers: list[tuple[int, int, int]], c_sym: str) -> str:
    """Rows per block as an expression of the row length ``c_sym`` (integer, >= 1), matching the kernel's dispatch."""
    return piecewise_expr([(rpb, cap) for _, rpb, cap in tiers], c_sym)


def stage_bytes_expr(cfg: "RowwiseConfig", tiers: list[tuple[int, int, int]], vec: int, entry_bytes: int, c_sym: str) -> str:
    """Dynamic shared memory (bytes) of a staged configuration at row length ``c_sym``: ``block`` threads times the
    vectors each caches, ``min(vecs, cdiv(C // vec, stride))``, ``entry_bytes`` each; the stride between a
    thread's vectors is the tier's threads per row (past the last tier's cap, the block size times the row's blocks S), as the
    kernel computes its count ``nc``; none where ``nc <= STAGE_REGS``, which stay in registers."""
    pieces = [(tpr, cap) for tpr, _, cap in tiers] + [(cfg.block * s, cap) for s, cap in split_tiers(cfg, vec)]
    nc = f"min({cfg.vecs}, cdiv({c_sym} // {vec}, {piecewise_expr(pieces, c_sym)}))"  # (C % vec != 0: the scalar path)
    return f"{cfg.block * entry_bytes} * {nc} * min(1, max(0, {nc} - {STAGE_REGS}))"


def grid_expr(tiers: list[tuple[int, int, int]], r_sym: str, c_sym: str) -> str:
    """``cdiv(R, rows_per_block(C))``, simplified when rows per block is constant."""
    rpb = rows_per_block_expr(tiers, c_sym)
    return r_sym if rpb == "1" else f"cdiv({r_sym}, {rpb})"


def split_tiers(cfg: "RowwiseConfig", vec: int) -> list[tuple[int, int | None]]:
    """``(blocks per row S, max_C)`` for rows past the last single-block tier of a cluster configuration: S = 2, 4, ...
    up to ``cfg.cluster``, each taking the rows that S blocks' caches hold (``S * block * vecs * vec`` elements); the
    last (the whole cluster) any longer row, the rest of it re-read. [] without a cluster."""
    out, s = [], 2
    while s <= cfg.cluster:
        out.append((s, s * cfg.block * cfg.vecs * vec if s < cfg.cluster else None))
        s *= 2
    return out


def split_expr_c(splits: list[tuple[int, int | None]], c_arg: str) -> str:
    """The kernel's choice of S (a C expression of the row length ``c_arg``), as :func:`split_tiers` orders them."""
    expr = str(splits[-1][0])
    for s, cap in reversed(splits[:-1]):
        expr = f"({c_arg} <= {cap} ? {s} : {expr})"
    return expr


def grid_expr_cluster(tiers: list[tuple[int, int, int]], splits: list[tuple[int, int | None]], cluster: int,
                      r_sym: str, c_sym: str) -> str:
    """The grid of a kernel compiled for clusters of ``cluster`` blocks: rows up to the last tier's cap take the
    tiers' blocks, rounded up to whole clusters (the extra blocks find no row); longer rows S blocks each
    (:func:`split_tiers`), ``cluster / S`` rows a cluster."""
    pieces = [(rpb * cluster, cap) for _, rpb, cap in tiers] + [(cluster // s, cap) for s, cap in splits]
    return f"{cluster} * cdiv({r_sym}, {piecewise_expr(pieces, c_sym)})"


def _sm(arch: str) -> int:
    m = re.match(r"sm_(\d+)", arch)
    return int(m.group(1)) if m else 0


def cluster_capable(arch: str) -> bool:
    """Whether ``arch`` (``sm_90a``, ``sm_100``...) has thread block clusters and distributed shared memory (sm_90+)."""
    return _sm(arch) >= 90


def stage_capable(arch: str) -> bool:
    """Whether ``arch`` has ``cp.async`` (sm_80+), which a staged configuration fills its cache with."""
    return _sm(arch) >= 80


@fit_check
def match_spec(spec: KernelSpec) -> RowwiseMatch | None:
    """The row-wise mapping of ``spec``, or None when the spec does not have the pattern (or its launch is fixed).

    Buffers: one input ``x[R, C]`` (bf16, f16, f32) and optionally a second one of x's shape and dtype (the
    residual, ``in`` or ``inout``); one or two outputs of x's shape (y, then ``h = x + res``, which needs the
    residual; :func:`variants` may swap them), any float dtype; up to two ``[C]`` inputs (weight, then bias);
    up to two per-row outputs ``[R]`` (float). Scalars: one integer equal to R, one to C, and eps (a constant
    float: the only one, else the one named eps..., else the only one in (0, 0.1)); other scalars are passed
    through. Anything else (a third ``[C]`` vector, an input of another shape, an output along the columns)
    refuses the spec."""
    syms = set(spec.symbols)
    bufs = [a for a in spec.args if a.is_buffer]
    scalars = [a for a in spec.args if not a.is_buffer]
    if any(a.dtype.value not in _FLOATS for a in bufs):
        raise NoFit("a buffer that is not bf16, f16 or f32: " + ", ".join(f"{a.name} ({a.dtype.value})" for a in bufs
                                                                          if a.dtype.value not in _FLOATS))
    ins2 = [a for a in bufs if a.role in ("in", "inout") and _is_2d(a.shape, syms)]
    if not ins2 or len(ins2) > 2 or ins2[0].role != "in":
        raise NoFit(f"two-dimensional inputs: {len(ins2)}; it takes x[R, C] (and a residual of its shape)"
                    + square_note(bufs)
                    if len(ins2) != 1 else f"its two-dimensional buffer {ins2[0].name} is {ins2[0].role}, not an input")
    x = ins2[0]
    r_sym, c_sym = (d.strip() for d in x.shape)
    res = ins2[1] if len(ins2) > 1 else None
    if res is not None and (res.dtype != x.dtype or list(shape_dims(res.shape)) != [r_sym, c_sym]):
        raise NoFit(f"a second input {res.name} of another dtype or shape than x ({x.name})")
    outs2 = [a for a in bufs if a.role == "out" and list(shape_dims(a.shape)) == [r_sym, c_sym]]
    stats = [a for a in bufs if a.role == "out" and list(shape_dims(a.shape)) == [r_sym]]
    vecs = [a for a in bufs if a.role == "in" and list(shape_dims(a.shape)) == [c_sym]]  # weight, then bias
    if len(outs2) + len(stats) + len(vecs) + len(ins2) != len(bufs):
        other = [a.name for a in bufs if a not in outs2 + stats + vecs + ins2]
        raise NoFit(f"buffers of another shape or role than the input {x.name}[{r_sym}, {c_sym}], outputs of its shape, "
                    f"[{c_sym}] weights and [{r_sym}] statistics: {', '.join(other)}")
    if not outs2 or len(outs2) > 2:
        raise NoFit(f"outputs of {x.name}'s shape [{r_sym}, {c_sym}]: {len(outs2)}; it writes one (y), or two (y and "
                    f"{x.name} + a residual)")
    if len(stats) > 2 or len(vecs) > 2:
        raise NoFit(f"per-row [{r_sym}] outputs: {len(stats)}, [{c_sym}] inputs: {len(vecs)}; it takes at most two of "
                    "each (statistics; a weight and a bias)")
    if len(outs2) == 2 and (res is None or res.role == "inout"):
        raise NoFit("a second output of x's shape, which it writes only as x + residual (an input residual)")
    y = outs2[0]
    h_out = outs2[1] if len(outs2) > 1 else None
    w = vecs[0] if vecs else None
    b = vecs[1] if len(vecs) > 1 else None
    sizes = size_args(scalars, r_sym, c_sym)
    eps = _eps_arg(scalars)
    if sizes is None or eps is None:
        raise NoFit(f"no integer scalars equal to {r_sym} and {c_sym}" if sizes is None
                    else "no eps: a float scalar (the only one, one named eps..., or the only one in (0, 0.1))")
    r_arg, c_arg = sizes
    inout = res is not None and res.role == "inout"
    return RowwiseMatch(
        x=x.name, w=w.name if w else None, y=y.name, r_arg=r_arg.name, c_arg=c_arg.name, eps_arg=eps.name,
        r_sym=r_sym, c_sym=c_sym, dtype=x.dtype.value, w_dtype=w.dtype.value if w else None, c_dtype=c_arg.dtype.value,
        b=b.name if b else None, b_dtype=b.dtype.value if b else None,
        y_dtype="" if y.dtype == x.dtype else y.dtype.value,
        res=res.name if res else None, res_inout=inout, h_out=h_out.name if h_out else None,
        h_dtype=(x.dtype.value if inout else h_out.dtype.value if h_out else None),
        stats=tuple((a.name, a.dtype.value, "") for a in stats),
    )


def _eps_arg(scalars):
    """The eps among the float scalars with a constant value: the only one, else the only one named like eps,
    else the only one in (0, 0.1); None when none or several remain."""
    floats = [a for a in scalars if a.dtype.value in ("f32", "f64") and isinstance(a.value, (int, float))
              and not isinstance(a.value, bool)]
    for pick in (lambda a: re.search(r"eps", a.name, re.I), lambda a: 0 < a.value < 0.1):
        if len(floats) > 1 and any(pick(a) for a in floats):
            floats = [a for a in floats if pick(a)]
    return floats[0] if len(floats) == 1 else None


# Per-row statistics a kernel of the class stores, as C expressions of the template's values for one row
# (mean: LayerNorm's; m2: the variance (layer) or the mean square (rms); scale: the rstd); the norms they fit.
STATS = {
    "mean": ("mean", ("layer",)),
    "rstd": ("scale", ("rms", "layer")),
    "var": ("m2", ("layer",)),
    "std": ("sqrtf(m2 + eps)", ("layer",)),
    "rms": ("sqrtf(m2 + eps)", ("rms",)),
}
# Evidence, first match wins, read from the output's name, then from what the source stores into it.
_STAT_WORDS = (
    ("rstd", r"rstd|inv|rsqrt|rcp|recip|(?<![\w.])1(?:\.0*)?f?\s*/"),
    ("rms", r"rms"),
    ("var", r"var"),
    ("std", r"std|sigma|sqrt"),
    ("mean", r"mean|(?<![a-z])mu(?![a-z])|avg|average"),
)
# Without evidence, the few plausible assignments for one or two per-row outputs, the most common first.
_PLAUSIBLE = {1: (("rstd",), ("mean",), ("rms",)), 2: (("mean", "rstd"), ("rstd", "mean"), ("mean", "var"))}
_H_NAME = r"res|sum|hidden|skip|add|pre|(?<![a-z])h(?![a-z])"


def _stat_evidence(name: str, text: str) -> list[str]:
    """The statistics that the output ``name`` may hold by its name, then by each value ``text`` stores into it
    (the first word that matches in each), without repeats; [] when none says."""
    out = []
    for src in [name] + stored_values(text, name):
        found = next((stat for stat, pattern in _STAT_WORDS if re.search(pattern, src, re.I)), None)
        if found and found not in out:
            out.append(found)
    return out


def residual_added(text: str, x: str, res: str) -> bool:
    """Whether ``text`` (a kernel, comments left out) adds the residual ``res`` to ``x``: one statement with a
    ``+`` that reads both, directly (``x[i] + res[i]``, conversions around either) or through variables
    assigned from them (``float a = x[i]; float r = res[i]; h = a + r;``), or a ``+=`` of one onto the other."""
    code = _COMMENTS.sub(" ", text)
    while re.search(r"\[[^\[\]]*\]", code):  # each subscript, innermost first, to a mark: an index's + is no addition
        code = re.sub(r"\[[^\[\]]*\]", "@", code)
    stmts = [s for s in re.split(r"[;{}]", code) if s.strip()]
    reads = {x: {x}, res: {res}}

    def uses(s, names):
        return any(re.search(rf"(?<![\w.]){re.escape(n)}(?!\w)", s) for n in names)

    for _ in range(3):  # what is assigned from x (or res) reads it too: a few levels through variables
        for s in stmts:
            m = re.match(r"\s*(?:[\w:<>]+\s+)*?([A-Za-z_]\w*)\s*=(?!=)(.*)", s, re.S)
            if m:
                for k in reads:
                    if uses(m.group(2), reads[k]):
                        reads[k].add(m.group(1))
    for s in stmts:
        m = re.match(r"\s*(?:[\w:<>]+\s+)*?([A-Za-z_]\w*)\s*(\+?)=(?!=)(.*)", s, re.S)
        rhs, lhs, plus_eq = (m.group(3), m.group(1), m.group(2)) if m else (s, "", "")
        if "+" in rhs.replace("++", "") and uses(rhs, reads[x]) and uses(rhs, reads[res]):
            return True
        if plus_eq and ((lhs in reads[x] and uses(rhs, reads[res])) or (lhs in reads[res] and uses(rhs, reads[x]))):
            return True
    return False


def divides_by(text: str, c_arg: str) -> bool:
    """Whether ``text`` (comments left out) divides by the scalar ``c_arg`` (``/ N``, ``/= N``, ``/ (float)N``,
    ``/ static_cast<float>(N)``, ``__fdividef(s, N)``, ``__frcp_rn((float)N)``): the mean over a row."""
    code = _COMMENTS.sub(" ", text)
    cast = r"(?:\(\s*[\w ]+\)\s*|static_cast\s*<[\w ]+>\s*\(\s*|\(\s*)*"
    return re.search(rf"(?:/=?|__fdividef\s*\([^;]*?,|rcp\w*\s*\()\s*{cast}{re.escape(c_arg)}(?!\w)", code) is not None


def variants(m: RowwiseMatch, text: str) -> list[tuple[RowwiseMatch, tuple[str, ...], bool]]:
    """The concrete forms of ``m`` for the kernel ``text``: ``(match, norms, evidence)`` per form, the norms it
    may compute, ``evidence`` False for a form proposed only as one of the plausible ones (it gets probes).

    None for a residual without evidence that the kernel adds it to x. Two ``[R, C]`` outputs are (y, h) in
    signature order unless the names say otherwise (an h-like name: res, sum, hidden...), else both orders.
    Per-row outputs get the statistic their name or stored values show; without it, each plausible one.
    None either for a kernel that never divides by the row length: both norms take a mean, an L2
    normalisation (``x / sqrt(sum x^2)``) of the same signature does not."""
    if not divides_by(text, m.c_arg) or (m.res and not residual_added(text, m.x, m.res)):
        return []
    forms = [m]
    if m.h_out:
        h_like = [bool(re.search(_H_NAME, n, re.I)) for n in (m.y, m.h_out)]
        swapped = replace(m, y=m.h_out, h_out=m.y, y_dtype="" if m.h_dtype == m.dtype else m.h_dtype, h_dtype=m.out_dtype)
        if h_like == [True, False]:
            forms = [swapped]
        elif h_like != [False, True]:
            forms = [m, swapped]
    out = []
    for f in forms:
        if not m.stats:
            out.append((f, ("rms", "layer"), True))
            continue
        seen = [_stat_evidence(name, text) for name, _, _ in m.stats]
        if all(seen):
            choices = [c for c in itertools.product(*seen) if len(set(c)) == len(c)]
        else:
            choices = [c for c in _PLAUSIBLE[len(seen)] if all(not s or c[i] in s for i, s in enumerate(seen))]
        evidence = all(seen)
        for k, stats in enumerate(choices):
            norms = tuple(n for n in ("rms", "layer") if all(n in STATS[s][1] for s in stats))
            assigned = tuple((name, dt, s) for (name, dt, _), s in zip(m.stats, stats))
            if norms:
                out.append((replace(f, stats=assigned), norms, evidence or k == 0))
    return out


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
    (1024, 32, 1, "ldg", "adaptive"), (512, 64, 1, "ldg", "adaptive"),
)


def _configs(m: RowwiseMatch, spec: KernelSpec, norms: tuple[str, ...] = ("rms", "layer"),
             evidence: bool = True, sm_count: int | None = None) -> list[RowwiseConfig]:
    """The whole space for the ``norms`` a form may compute: LayerNorm only with a bias (an RMSNorm with a
    bias is no standard operation) or a LayerNorm statistic; RMS only with an RMS statistic; else the RMS
    space plus its first two points as LayerNorm (the verifier tells which one fits). A form proposed
    without evidence (one of several plausible statistics) gets the first point of each norm only.
    With a residual the register cache holds x and res: half the vectors (a staged cache is sized for its entries).
    Full occupancy (32 registers) and pipelined configurations (``sm_count``: the GPU's) only where :func:`full_fits`."""
    configs = tuning_space(m, spec, sm_count)
    if not full_fits(m):
        configs = [c for c in configs if not c.full and not c.persist]
    if m.res:
        configs = list(dict.fromkeys(c if c.stage else replace(c, vecs=max(1, c.vecs // 2)) for c in configs))
    if m.b:
        norms = tuple(n for n in norms if n == "layer")
    if not evidence:
        configs = configs[:1]
    if norms == ("layer",):
        return [replace(c, norm="layer") for c in configs]
    if norms == ("rms",):
        return configs
    if norms:
        return configs + [replace(c, norm="layer") for c in configs[:2 if evidence else 1]]
    return []


def full_fits(m: RowwiseMatch) -> bool:
    """Whether a form's half-cache short configurations may ask for full occupancy (32 registers a thread), and its
    short rows be pipelined (:data:`PIPE_REGISTERS`): RMSNorm of
    a 2-byte x into a 2-byte y, a 2-byte weight (or none), a 32-bit row length, no residual, no per-row statistics.
    With NVRTC 13.0 those compiled without spills; LayerNorm, a residual, an f32 x or y, statistics outputs or a 64-bit
    row length spilled."""
    return (_ITEMSIZE[m.dtype] == 2 and _ITEMSIZE[m.out_dtype] == 2 and _ITEMSIZE[m.w_dtype or m.dtype] == 2
            and m.c_dtype == "i32" and not m.res and not m.stats and not m.b)


def tuning_space(m: RowwiseMatch, spec: KernelSpec, sm_count: int | None = None) -> list[RowwiseConfig]:
    """RMS configurations, best first (``_ORDER``), with register caches sized from the longest benchmark row.

    ``fit(block)`` is the smallest power-of-two cache (at most 16 vectors) that holds the longest
    bench row with ``block`` threads per row; each entry asks for half, one or two times that, at most
    :data:`REGISTER_CACHE` vectors a block. From sm_80 each
    entry with the read-only hint has a staged twin just after it (:func:`stage_vecs`). In a covering order, each kind
    of bench row's likeliest configurations before any kind's alternatives: from sm_90 the wide cluster
    configurations (:func:`cluster_configs` at 2 * CLUSTER_CACHE vectors a thread, for the longest bench row and each
    shorter one that needs a cluster) and the first register and staged pair, the cluster ones first where the first
    configuration would re-read part of the longest row; then, where the first configuration gives a thread fewer than
    :data:`SHORT_CACHE` vectors of the shortest bench row, :func:`short_configs` for that row, then with the GPU's
    ``sm_count`` (a job on a GPU) :func:`pipe_configs`; then the other cluster configurations (fewer vectors
    a thread, staged); then the rest of ``_ORDER``.
    """
    c_max = max(int(s[m.c_sym]) for s in spec.bench.sizes)
    nvec = -(-c_max // m.vec)
    nvec_min = -(-min(int(s[m.c_sym]) for s in spec.bench.sizes) // m.vec)

    def fit(block: int, mult: float) -> int:
        v = 1
        while v < 16 and block * v < nvec:
            v *= 2
        return int(min(16, REGISTER_CACHE // block, max(1, v * mult)))

    out = [RowwiseConfig(b, r, fit(b, k), hint, grid) for b, r, k, hint, grid in _ORDER]
    entry = 32 if m.res else 16
    if stage_capable(spec.arch):
        out = [x for c in out for x in (c, *(
            [replace(c, stage=True, vecs=stage_vecs(c.block, nvec, entry))] if c.hint == "ldg" else []))]
    # covering order: each kind of bench row gets its likeliest configurations before any gets its alternatives
    k = 2 if stage_capable(spec.arch) else 1  # the first register configuration and its staged twin
    pair, rest = out[:k], out[k:]
    # the configurations sized from the longest row hold little of the shortest in flight a thread: ones sized from the
    # shortest follow
    shorts = []
    if thread_vectors(out[0], nvec_min, m.vec) < SHORT_CACHE:
        shorts = short_configs(nvec_min, wpre=bool(m.w or m.b)) + (pipe_configs(nvec_min, sm_count) if sm_count else [])
    wide, others = [], []
    if cluster_capable(spec.arch):
        # the longest row's, with for each shorter bench row that needs a cluster the wide ones sized for it (a
        # smaller cluster where it needs one: fewer blocks wait on each other, a cluster is scheduled sooner); those
        # caching 2 * CLUSTER_CACHE vectors a thread first, the others (and the staged ones) after the short rows'
        longer = sorted({-(-int(s[m.c_sym]) // m.vec) for s in spec.bench.sizes} - {nvec}, reverse=True)
        registers = cluster_configs(nvec) + [c for n in longer for c in cluster_configs(n, wide_only=True)]
        wide = [c for c in registers if c.vecs >= 2 * CLUSTER_CACHE]
        others = [c for c in registers if c.vecs < 2 * CLUSTER_CACHE] + cluster_configs(nvec, entry, wpre_words=wb_words(m), arch=spec.arch)
    # the wide cluster configurations lead where the first one would re-read part of the longest bench row (a second
    # pass over memory there): a kernel that must hold the row is judged first by one that does
    rereads = out[0].block * out[0].vecs < nvec
    out = (wide + pair if rereads else pair + wide) + shorts + others + rest
    return list(dict.fromkeys(out))  # drop duplicates (small rows), keep the order


# Short rows: a thread caches SHORT_CACHE 16-byte vectors of the shortest bench row (or of the next longer tiers' rows),
# so that each has that many loads in flight at once with few registers (more threads an SM): the fewest threads per
# row, down to MIN_TPR, whose caches hold it; for each block size of SHORT_BLOCKS, also at half that cache (twice the
# threads a row), those last also at full occupancy (32 registers: more of the rows in flight an SM; for the forms of
# full_fits, where 2 vectors a thread compiled without spills on CUDA 13.0 and 4 did not) and with w preloaded (its few
# vectors a thread read once into registers, before x).
SHORT_CACHE = 4
SHORT_BLOCKS = (256, 512, 128)


def thread_vectors(cfg: RowwiseConfig, nvec: int, vec: int) -> int:
    """The vectors each thread of ``cfg`` takes of a row of ``nvec`` 16-byte vectors (``vec`` elements each): the row
    over the threads per row of the first tier that holds it (the last tier past every cap; a split row counts as
    one block's: what a cluster shares out is not in this count)."""
    tiers = cfg.tiers(vec)
    tpr = next((t for t, _, cap in tiers if nvec * vec <= cap), tiers[-1][0])
    return -(-nvec // tpr)


def _short_tpr(nvec: int, cache: int) -> int:
    """The fewest threads a row (a power of two from :data:`MIN_TPR` up to a warp) whose ``cache`` vectors each hold a
    row of ``nvec`` 16-byte vectors; a warp where none does."""
    tpr = MIN_TPR
    while tpr < 32 and tpr * cache < nvec:
        tpr *= 2
    return tpr


def short_configs(nvec: int, wpre: bool = False) -> list[RowwiseConfig]:
    """Register configurations for rows of ``nvec`` 16-byte vectors that are short for a block: per block size of
    :data:`SHORT_BLOCKS` and cache of ``SHORT_CACHE`` and half that, the rows per block that give the row's first
    tier the fewest threads (a power of two, at least :data:`MIN_TPR`, at most a warp) whose caches hold it (grid
    adaptive: longer rows take more threads each, fewer rows a block). Then the half-cache ones again at full occupancy
    and, with ``wpre`` (a kernel with a weight or bias), with it preloaded (:class:`RowwiseConfig`)."""
    out = [RowwiseConfig(block, block // _short_tpr(nvec, cache), cache)
           for block in SHORT_BLOCKS for cache in (SHORT_CACHE, SHORT_CACHE // 2)]
    half = [c for c in out if c.vecs < SHORT_CACHE]
    return out + [replace(c, full=True) for c in half] + [replace(c, wpre=True) for c in half if wpre]


# Pipelined short rows (persist > 0): the half-cache configurations of short_configs (PIPE_CACHE vectors a thread) as a
# persistent grid of the GPU's SM count times the blocks an SM holds at PIPE_REGISTERS[vecs - 1] registers a thread (with
# NVRTC 13.0 for sm_90, the forms of full_fits compiled without spills there: two register caches, a row's and the next
# one's, and 64-bit row arithmetic; none at 32), each thread loading its next row before it reduces and writes this one.
# Not at one vector a thread: on the H200 (bench/results/h200-2026-12-04-e, call 1) those were issue-bound (Nsight
# Compute at 32768 x 256: SM throughput 56%, "not selected" the top stall) and 1-4 points of copy behind two vectors.
PIPE_REGISTERS = (40, 48)
PIPE_CACHE = 2


def pipe_configs(nvec: int, sm_count: int) -> list[RowwiseConfig]:
    """Pipelined configurations for rows of ``nvec`` 16-byte vectors on a GPU of ``sm_count`` SMs: per block size of
    :data:`SHORT_BLOCKS`, :data:`PIPE_CACHE` vectors a thread over the fewest threads a row (at least :data:`MIN_TPR`,
    at most a warp; grid adaptive), ``persist`` the blocks of one full wave (:attr:`RowwiseConfig.min_blocks` per SM)."""
    out = []
    for block in SHORT_BLOCKS:
        cfg = RowwiseConfig(block, block // _short_tpr(nvec, PIPE_CACHE), PIPE_CACHE, persist=1)  # (its min_blocks)
        out.append(replace(cfg, persist=sm_count * cfg.min_blocks))
    return out


# A register cache holds at most REGISTER_CACHE 16-byte vectors a block (4 registers each: half of an SM's 65536), so a
# block of 1024 threads caches at most 8 a thread: 16 left it 64 registers for everything and it spilled.
REGISTER_CACHE = 8192
# A staged thread that caches at most STAGE_REGS vectors (a short row) keeps them in registers: with one or two in
# flight the trip through shared memory is latency only, and two vectors cost a handful of registers.
STAGE_REGS = 2
# Registers a staged kernel takes besides a preloaded w (NVRTC 13.0, sm_90, RMSNorm bf16: 48 with its register tiers for
# short rows); a staged configuration with wpre asks its launch bounds for that plus w's (and b's) words (_min_blocks).
STAGE_BASE_REGISTERS = 48
# A staged cluster configuration takes w preloaded only where the blocks an SM then holds (its registers, w's among them,
# and its shared memory) still have STAGED_WPRE_IN_FLIGHT bytes of x in flight. On the H200 (bench/results/
# h200-2026-12-04-f, RMSNorm bf16, rows of 32768 to 262144) preloading took those with 96-128 KiB an SM from 75-78% of
# copy to 87-90% (256 threads: 16 vectors over 8 blocks, 8 over 16), while those left 32-64 KiB (512 threads, one block
# of 8 vectors or two of 4; 1024 threads) reached 44-74%, below their plain twins where they had one.
STAGED_WPRE_IN_FLIGHT = 96 * 1024
# A staged cache takes at most STAGE_BYTES of shared memory a block: a third of an sm_90 SM's 228 KiB, so three such
# blocks (and their loads in flight) fit one SM. At shorter rows the launch asks for less (stage_bytes_expr).
STAGE_BYTES = 64 * 1024


def stage_cap(block: int, entry: int) -> int:
    """The most vectors a thread of a staged block of ``block`` threads may cache: what :data:`STAGE_BYTES` holds at
    ``entry`` bytes a vector (16; 32 with a residual)."""
    return max(1, STAGE_BYTES // (block * entry))


def stage_vecs(block: int, nvec: int, entry: int, cluster: int = 1) -> int:
    """Vectors a thread of a staged configuration may cache: the smallest power of two with which ``cluster`` blocks
    of ``block`` threads hold a row of ``nvec`` vectors, at most :func:`stage_cap`."""
    cap = stage_cap(block, entry)
    v = 1
    while 2 * v <= cap and cluster * block * v < nvec:
        v *= 2
    return v


# Rows split over a cluster: a block's share of the row is cached in CLUSTER_CACHE 16-byte vectors per thread (16
# registers: two blocks of 1024 threads still fit an SM's register file) over the smallest cluster that holds the row,
# and in twice that (more of the row in flight a thread, the fewest blocks a row) where a block of at most
# CLUSTER_WIDE_BLOCK threads can. Clusters up to harness.static_checks.MAX_CLUSTER_BLOCKS: 16 on sm_90, past the
# portable 8 (the worker opts such a kernel in when it loads it).
CLUSTER_CACHE = 4
CLUSTER_SIZES = (2, 4, 8, MAX_CLUSTER_BLOCKS)
CLUSTER_BLOCKS = (512, 256, 1024)
CLUSTER_WIDE_BLOCK = 512


def cluster_configs(nvec: int, stage_entry: int = 0, wide_only: bool = False, wpre_words: int = 0,
                    arch: str = "sm_90") -> list[RowwiseConfig]:
    """Configurations that split rows of ``nvec`` 16-byte vectors over a thread block cluster, for each block size
    whose block cannot cache the row in :data:`CLUSTER_CACHE` vectors per thread: the smallest cluster that holds
    the row at that cache (else the largest), with the smallest register cache (a power of two, at most
    2 * CLUSTER_CACHE) that holds it over the cluster; before it, for blocks of at most :data:`CLUSTER_WIDE_BLOCK`
    threads, the smallest cluster that holds it at 2 * CLUSTER_CACHE, where that is another configuration. With
    ``stage_entry`` (bytes a cached vector: 16, 32 with a residual) the staged ones instead: the cache per thread
    is what :data:`STAGE_BYTES` holds (:func:`stage_vecs`). [] when every block size holds the row alone.
    ``wide_only``: only the configurations at 2 * CLUSTER_CACHE, for blocks of at most CLUSTER_WIDE_BLOCK threads that
    cannot hold the row alone at that cache. ``wpre_words`` (staged, a kernel with a weight or bias: the 32-bit words
    of w and b a vector): each staged one with w preloaded into registers in its place, and also over twice the blocks
    (half the cache a thread, fewer registers for w) where the cluster may grow: QuACK's design (a block's part of the
    row in shared memory, its w in registers from the start), each only where an SM still holds
    :data:`STAGED_WPRE_IN_FLIGHT` bytes of x in flight (:func:`staged_wpre_in_flight`, on an SM of ``arch``)."""
    out = []
    for block in CLUSTER_BLOCKS:
        wide = _fewest_blocks(nvec, block, 2 * CLUSTER_CACHE)
        if wide_only:
            if block <= CLUSTER_WIDE_BLOCK and block * 2 * CLUSTER_CACHE < nvec:
                out.append(RowwiseConfig(block, block // 32, _cluster_vecs(nvec, block, wide), cluster=wide))
            continue
        cap = stage_cap(block, stage_entry) if stage_entry else CLUSTER_CACHE
        if block * cap >= nvec:
            continue
        cl = _fewest_blocks(nvec, block, cap)
        if stage_entry:
            # over twice the blocks (each block's cache the least, as QuACK at 262144) with w preloaded only: without it
            # those reached 41-74% of copy there on the H200 (bench/results/h200-2026-12-04-e)
            staged = RowwiseConfig(block, block // 32, stage_vecs(block, nvec, stage_entry, cl), cluster=cl, stage=True)
            twin = replace(staged, wpre=True)
            wider = (replace(twin, cluster=2 * cl, vecs=stage_vecs(block, nvec, stage_entry, 2 * cl))
                     if 2 * cl <= CLUSTER_SIZES[-1] and staged.vecs > 1 else None)
            preloaded = [c for c in (twin, wider) if c is not None and wpre_words
                         and staged_wpre_in_flight(c, wpre_words, stage_entry, arch) >= STAGED_WPRE_IN_FLIGHT]
            out += ([] if twin in preloaded else [staged]) + preloaded
            continue
        if block <= CLUSTER_WIDE_BLOCK and wide != cl:
            out.append(RowwiseConfig(block, block // 32, _cluster_vecs(nvec, block, wide), cluster=wide))
        out.append(RowwiseConfig(block, block // 32, _cluster_vecs(nvec, block, cl), cluster=cl))
    return list(dict.fromkeys(out))


def _fewest_blocks(nvec: int, block: int, cache: int) -> int:
    """The smallest cluster size of :data:`CLUSTER_SIZES` whose blocks of ``block`` threads, ``cache`` vectors each,
    hold a row of ``nvec`` vectors; the largest where none does."""
    return next((c for c in CLUSTER_SIZES if c * block * cache >= nvec), CLUSTER_SIZES[-1])


def _cluster_vecs(nvec: int, block: int, cluster: int) -> int:
    """The smallest power of two (at most 2 * CLUSTER_CACHE) of vectors a thread with which ``cluster`` blocks of
    ``block`` threads hold a row of ``nvec`` vectors."""
    v = 1
    while v < 2 * CLUSTER_CACHE and cluster * block * v < nvec:
        v *= 2
    return v


class RowwiseNormFamily:
    """Expert row-wise normalisation skeleton.

    Without a bias: about 22 RMSNorm instances with register caches, from sm_80 each with the read-only hint
    also staged, from sm_90 the cluster ones where a bench row needs them, plus 2 LayerNorm ones (on an RMSNorm
    kernel the latter must fail verification). With a bias (``b[C]``): the same configurations as LayerNorm.
    """

    name = "rowwise"

    def _forms(self, ctx: GenContext) -> tuple[list, str | None]:
        """The forms of the kernel the skeleton may compute (:func:`variants`), or [] and why none."""
        m = match_spec(ctx.spec)
        if m is None:
            return [], match_spec.why(ctx.spec)
        if not scalars_unused(ctx.spec, ctx.kernel.text, {m.r_arg, m.c_arg, m.eps_arg}):
            return [], "a scalar besides the row count, the row length and eps is part of the kernel's math"
        forms = variants(m, ctx.kernel.text)
        if forms:
            return forms, None
        if not divides_by(ctx.kernel.text, m.c_arg):
            return [], f"the kernel never divides by the row length {m.c_arg}: it takes no mean (an L2 normalisation?)"
        return [], f"a second input of x's shape ({m.res}) that the source does not add to x"

    def why_not(self, ctx: GenContext) -> str | None:
        """Why the skeleton does not fit ``ctx``'s spec or source (None where it does; what no family takes, a template
        or a signature unlike the spec, is :func:`~ptxfactory.search.base.kernel_refusal`'s)."""
        return self._forms(ctx)[1]

    def propose(self, ctx: GenContext) -> list[Candidate]:
        forms, _ = self._forms(ctx)
        sms = getattr(ctx.facts, "sm_count", None)  # (the GPU's, when the job has one: the pipelined configurations)
        pairs = [(f, cfg) for f, norms, evidence in forms for cfg in _configs(f, ctx.spec, norms, evidence, sms)]
        return family_candidates(ctx, bool(pairs), pairs, lambda fc: self.instantiate(ctx, *fc))

    def instantiate(self, ctx: GenContext, m: RowwiseMatch, cfg: RowwiseConfig) -> Candidate:
        """The candidate for one configuration (the spec must match: ``m = match_spec(ctx.spec)``, or one of its
        :func:`variants`)."""
        text = render_kernel(ctx, m, cfg)
        tiers = cfg.tiers(m.vec)
        params = cfg.params()
        extra = ""
        if m.stats:
            params["stats"] = ",".join(s for _, _, s in m.stats)
            extra += " stats=" + ",".join(f"{n}:{s}" for n, _, s in m.stats)
        if m.res:
            params["residual"] = "inout" if m.res_inout else "out" if m.h_out else "in"
            extra += f" +{m.res}" + (f" h={m.h}" if m.h else "")
        if m.h_out:
            params["y"] = m.y
        desc = (
            f"rowwise {cfg.norm} block={cfg.block} rpb={cfg.rows_per_block}{'' if cfg.grid == 'fixed' else '..' + str(tiers[-1][1])} "
            f"vec16x{cfg.vecs} tpr={tiers[0][0]}..{tiers[-1][0]}" + (f" cluster={cfg.cluster}" if cfg.cluster > 1 else "")
            + (" stage=smem" if cfg.stage else "") + (" wpre" if cfg.wpre else "") + (" occ=full" if cfg.full else "")
            + (f" pipe={cfg.persist}" if cfg.persist else "")
            + (" stream" if cfg.hint == "stream" else "") + extra
        )
        grid = _grid(cfg, tiers, m)
        return family_candidate(ctx, self.name, text, grid, cfg.block, desc, params, shared_mem=_shared_mem(cfg, tiers, m))


def _shared_mem(cfg: RowwiseConfig, tiers: list[tuple[int, int, int]], m: RowwiseMatch) -> str | int:
    """The launch's dynamic shared memory (bytes, an expression of the spec's C symbol): a staged cache, else 0."""
    return stage_bytes_expr(cfg, tiers, m.vec, 32 if m.res else 16, m.c_sym) if cfg.stage else 0


def _grid(cfg: RowwiseConfig, tiers: list[tuple[int, int, int]], m: RowwiseMatch) -> str:
    """The launch grid of ``cfg`` (an expression of the spec's R and C symbols); pipelined, at most ``cfg.persist``
    blocks (a block then takes every gridDim-th group of rows)."""
    if cfg.cluster > 1:
        return grid_expr_cluster(tiers, split_tiers(cfg, m.vec), cfg.cluster, m.r_sym, m.c_sym)
    if cfg.persist:
        return f"min({cfg.persist}, {grid_expr(tiers, m.r_sym, m.c_sym)})"
    return grid_expr(tiers, m.r_sym, m.c_sym)


# The sums of acc[0] of a row's S blocks (ranks first .. first + S - 1 of the cluster, each block's already combined),
# through distributed shared memory and mbarriers (sm_90 PTX, the st.async route). Each block's shared memory holds,
# per sum (``which``: LayerNorm takes two), CL slots and one mbarrier (after the 2 x CL slots, 8-byte aligned), used
# once (phase 0). At the start thread 0 initialises the barriers and fences them for the cluster, and every thread
# arrives (relaxed) on the cluster barrier, whose wait comes before the first remote store: every block of the
# cluster has started and set its barriers. Per sum, thread 0 arms its block's barrier for the S slots' bytes; thread
# k < S stores this block's sum into slot ``rank`` of the row's block first + k with st.async, which counts the bytes
# on that block's barrier; every thread waits on its own block's barrier and sums the S slots in rank order
# (identical results in every block of the row). Only the row's S blocks wait on each other, and every store into a
# block's shared memory completes before that block passes its wait, so no barrier is needed before a block leaves.
# On the H200 (2026-12-04, bench/results/h200-2026-12-04-c, % of copy at N = 65536 / 131072 / 262144) it took the
# 512-thread register configuration from 80 / 80 / 77 to 92 / 91 / 89, against sums pulled by every thread from the
# peers between two barriers over the whole cluster; pushed was ahead in 23 of the 24 long-row measurements of the 8
# cluster configurations (by up to 12 points; one was 1 point behind).
_CLUSTER_SUM = r"""
static __device__ __forceinline__ void ptxf_cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }
static __device__ __forceinline__ unsigned long long* ptxf_cluster_bar(float* cl, int which)
{
    return reinterpret_cast<unsigned long long*>(cl + 2 * ${CL}) + which;
}
static __device__ __forceinline__ void ptxf_cluster_start(float* cl)
{
    if (threadIdx.x == 0) {
#pragma unroll
        for (int k = 0; k < 2; ++k) {
            const unsigned bar = static_cast<unsigned>(__cvta_generic_to_shared(ptxf_cluster_bar(cl, k)));
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(bar) : "memory");
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncwarp();  // (the warp converged again before an .aligned barrier)
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
static __device__ __forceinline__ void ptxf_cluster_sum(float (&acc)[2], float* cl, int which, int first, int S, int rank)
{
    float* slots = cl + which * ${CL};
    const unsigned bar = static_cast<unsigned>(__cvta_generic_to_shared(ptxf_cluster_bar(cl, which)));
    if (threadIdx.x == 0)  // this block expects S slots of 4 bytes (stores that come first count down early: fine)
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(S * 4) : "memory");
    if (threadIdx.x < S) {
        const unsigned slot = static_cast<unsigned>(__cvta_generic_to_shared(slots + rank)), peer = first + threadIdx.x;
        unsigned rslot, rbar;
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(rslot) : "r"(slot), "r"(peer));
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(rbar) : "r"(bar), "r"(peer));
        asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];"
                     :: "r"(rslot), "r"(__float_as_uint(acc[0])), "r"(rbar) : "memory");
    }
    unsigned done = 0;
    do {
        asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], 0;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}" : "=r"(done) : "r"(bar) : "memory");
    } while (!done);
    float s = 0.f;
    for (int k = 0; k < S; ++k) s += slots[k];
    acc[0] = s;
}
"""
# Without a cluster the template still names them (in discarded ``if constexpr`` branches): empty stand-ins.
_NO_CLUSTER = """
static __device__ __forceinline__ void ptxf_cluster_sum(float (&)[2], float*, int, int, int, int) {}
static __device__ __forceinline__ void ptxf_cluster_start(float*) {}
static __device__ __forceinline__ void ptxf_cluster_wait() {}
"""


def _align(dt: str, vec: int) -> int:
    """The alignment (bytes) of one vector of ``vec`` elements of ``dt``, as the vector path accesses it."""
    return min(16, vec * _ITEMSIZE[dt])


def _min_blocks(m: RowwiseMatch, cfg: RowwiseConfig) -> int:
    """``cfg.min_blocks``; with a residual the cache holds two vectors per entry: 128 registers from 4 entries on
    (staged: its STAGE_REGS entries in registers already take them past 64); a staged cache with w (and b) preloaded:
    :data:`STAGE_BASE_REGISTERS` plus the words of w (and b) of each cached vector."""
    if m.res and (cfg.vecs >= 4 or cfg.stage):
        return max(1, REGISTERS_PER_SM // (cfg.block * 128))
    if cfg.stage and cfg.wpre:
        return staged_wpre_blocks(cfg, wb_words(m))
    return cfg.min_blocks


def _wb_parts(m: RowwiseMatch) -> list[tuple[str, str, str]]:
    """``(ptr, dtype, field)`` of w and b, those the kernel has: ``ptr`` the name ``ptxf_load_wb`` reads them by,
    ``field`` their words' in ``ptxf_wb`` (a missing dtype is w's, a missing w's x's)."""
    wdt = m.w_dtype or m.dtype
    return [(ptr, dt, field) for present, ptr, dt, field in ((m.w, "w", wdt, "g"), (m.b, "b", m.b_dtype or wdt, "h")) if present]


def wb_words(m: RowwiseMatch) -> int:
    """The 32-bit words of w and b (those the kernel has) of one vector of ``m.vec`` elements: what a preloaded vector
    holds in registers (0: neither)."""
    return sum(m.vec * _ITEMSIZE[dt] // 4 for _, dt, _ in _wb_parts(m))


def staged_wpre_blocks(cfg: RowwiseConfig, words: int) -> int:
    """Blocks of a staged configuration with w preloaded that an SM's registers hold: :data:`STAGE_BASE_REGISTERS` a
    thread plus ``words`` for each vector it may cache (its launch bounds' second argument)."""
    return max(1, REGISTERS_PER_SM // (cfg.block * (STAGE_BASE_REGISTERS + words * cfg.vecs)))


def staged_wpre_in_flight(cfg: RowwiseConfig, words: int, entry: int, arch: str = "sm_90") -> int:
    """Bytes of x (``entry`` bytes a cached vector) an SM of ``arch`` holds in flight with a staged configuration whose w
    is preloaded, at a row that fills its cache: the blocks an SM holds at its launch bounds' registers
    (:data:`STAGE_BASE_REGISTERS` plus ``words`` a cached vector) and that cache in shared memory
    (:func:`ptxfactory.harness.occupancy.occupancy`), times a block's cache."""
    cache = cfg.block * cfg.vecs * entry
    return occupancy(arch, cfg.block, STAGE_BASE_REGISTERS + words * cfg.vecs, cache).blocks_per_sm * cache


def render_kernel(ctx: GenContext, m: RowwiseMatch, cfg: RowwiseConfig) -> str:
    """The kernel text (helpers + ``__global__`` definition) for one configuration, in the user's signature."""
    tx = _CTYPE[m.dtype]
    tw = _CTYPE[m.w_dtype or m.dtype]
    tb = _CTYPE[m.b_dtype or m.w_dtype or m.dtype]
    ty = _CTYPE[m.out_dtype]
    th = _CTYPE[m.h_dtype or m.dtype]
    ts = [_CTYPE[m.stats[i][1]] if i < len(m.stats) else "float" for i in range(2)]
    idx = "int" if m.c_dtype == "i32" else "long long"
    vec = m.vec
    layer = "true" if cfg.norm == "layer" else "false"
    w_arg = m.w if m.w else f"static_cast<const {tw}*>(nullptr)"
    b_arg = m.b if m.b else f"static_cast<const {tb}*>(nullptr)"
    res_arg = m.res if m.res else f"static_cast<const {tx}*>(nullptr)"
    h_arg = m.h if m.h else f"static_cast<{th}*>(nullptr)"
    s_args = [m.stats[i][0] if i < len(m.stats) else f"static_cast<{ts[i]}*>(nullptr)" for i in range(2)]
    cl = cfg.cluster
    args = (f"{m.x}, {w_arg}, {b_arg}, {m.y}, (long long){m.r_arg}, ({idx}){m.c_arg}, (float){m.eps_arg}, ptxf_red, ptxf_vec, "
            f"{res_arg}, {h_arg}, {s_args[0]}, {s_args[1]}, {'ptxf_cl' if cl > 1 else 'nullptr'}, "
            f"{'reinterpret_cast<ptxf_xv*>(ptxf_stage)' if cfg.stage else 'nullptr'}")
    tiers = cfg.tiers(vec)
    calls = [(f"ptxf_rowwise<{tpr}, {rpb}, {cfg.vecs}, {layer}>({args}, 1);", cap) for tpr, rpb, cap in tiers]
    if cl > 1:  # rows past one block's cache: S blocks of a cluster each
        split = split_expr_c(split_tiers(cfg, vec), m.c_arg)
        calls.append((f"ptxf_rowwise<{cfg.block}, 1, {cfg.vecs}, {layer}, {cl}>({args}, {split});", None))
    lines = []
    for i, (call, cap) in enumerate(calls):
        last = i == len(calls) - 1
        lines.append("    " + ("else " if i else "") + (call if last else f"if ({m.c_arg} <= {cap}) {call}"))
    w_aligned = f" && ptxf_aligned({m.w}, {_align(m.w_dtype, vec)})" if m.w else ""
    b_aligned = f" && ptxf_aligned({m.b}, {_align(m.b_dtype, vec)})" if m.b else ""
    extra_aligned = f" && ptxf_aligned({m.res}, 16)" if m.res else ""
    if m.h_out:
        extra_aligned += f" && ptxf_aligned({m.h_out}, {_align(m.h_dtype, vec)})"
    w_scalar = "o * ptxf_w2f(w[j])" if m.w else "o"  # w, b: ptxf_rowwise's parameters, whatever the user's names
    if m.b:
        w_scalar += " + ptxf_b2f(b[j])"
    linkage = kernel_linkage(ctx.kernel)
    body = load_template(_TEMPLATE).substitute(
        CONVERT=_convert(m, cfg, tx, tw, tb, idx),
        TX=tx, TW=tw, TB=tb, TY=ty, TH=th, TS0=ts[0], TS1=ts[1], IDX=idx, VEC=vec, BLOCK=cfg.block,
        W_SCALAR=w_scalar, B_ALIGNED=b_aligned, EXTRA_ALIGNED=extra_aligned, Y_ALIGN=_align(m.out_dtype, vec),
        LINKAGE=linkage, KERNEL=ctx.kernel.name, PARAMS=render_params(ctx.kernel),
        MINB=_min_blocks(m, cfg), C=m.c_arg, X=m.x, Y=m.y, W_ALIGNED=w_aligned, DISPATCH="\n".join(lines),
        CLUSTER_NOTE=f"here {cl} blocks" if cl > 1 else "not in this instance",
        CLUSTER_HELPERS=_CLUSTER_SUM.replace("${CL}", str(cl)) if cl > 1 else _NO_CLUSTER,
        # what __cluster_dims__(cl, 1, 1) expands to, spelled so that tree-sitter-cuda reads the definition
        CLUSTER_DIMS=f"__attribute__((cluster_dims({cl}, 1, 1))) " if cl > 1 else "",
        CLUSTER_DECL=(f"\n    __shared__ __align__(8) float ptxf_cl[{2 * cl + 4}];  // the row's blocks' sums, stored by "
                      "them, and their two mbarriers") if cl > 1 else "",
        STAGE="true" if cfg.stage else "false", STAGE_REGS=STAGE_REGS,
        STAGE_NOTE="here" if cfg.stage else "not in this instance",
        WPRE="true" if cfg.wpre else "false", WPRE_NOTE="here" if cfg.wpre else "not in this instance",
        PIPE="true" if cfg.persist else "false", PIPE_NOTE=f"here, at most {cfg.persist} blocks" if cfg.persist else "not in this instance",
        STAGE_DECL="\n    extern __shared__ __align__(16) unsigned char ptxf_stage[];  // the staged cache (launch-sized)" if cfg.stage else "",
    )
    # The helpers are C++ templates: give them C++ linkage even when the kernel sits in an extern "C" block.
    head, sep, kernel = body.rpartition(f"{linkage}__global__ void __launch_bounds__")
    smem = _shared_mem(cfg, tiers, m)
    launch = (f"// Launch: grid ({_grid(cfg, tiers, m)},), block ({cfg.block},), "
              + (f"dynamic shared memory {smem} bytes" if smem else "no dynamic shared memory")
              + (f"; clusters of {cl} blocks (compiled in{_NON_PORTABLE if cl > PORTABLE_CLUSTER_BLOCKS else ''}).\n"
                 if cl > 1 else ".\n"))
    return f'extern "C++" {{\n{head.rstrip()}\n}}  // extern "C++"\n\n{launch}{sep}{kernel}'


# A cluster past the portable 8 blocks launches only once the host opts the kernel in (the worker does when it loads it).
_NON_PORTABLE = ("; past the portable 8: before launching, cudaFuncSetAttribute(kernel, "
                 "cudaFuncAttributeNonPortableClusterSizeAllowed, 1)")


def _vector_words(ptr: str, dt: str, vec: int, dst: str) -> str:
    """C statements loading the ``vec`` elements of a ``[C]`` vector ``ptr`` (dtype ``dt``) at vector index ``v`` as
    32-bit words into ``unsigned {dst}[vec * itemsize / 4]``: 8, 16 or 32 bytes through the read-only path."""
    nbytes = vec * _ITEMSIZE[dt]
    if nbytes == 8:
        return (f"    {{ const uint2 q = __ldg(reinterpret_cast<const uint2*>({ptr}) + v); "
                f"{dst}[0] = q.x; {dst}[1] = q.y; }}")
    loads = [("v", 0)] if nbytes == 16 else [("2 * v", 0), ("2 * v + 1", 4)]
    return "\n".join(
        f"    {{ const uint4 q = __ldg(reinterpret_cast<const uint4*>({ptr}) + {at}); "
        f"{dst}[{o}] = q.x; {dst}[{o + 1}] = q.y; {dst}[{o + 2}] = q.z; {dst}[{o + 3}] = q.w; }}" for at, o in loads)


def _unpack_words(src: str, dt: str, vec: int, out: str) -> str:
    """C statements unpacking the words ``src[...]`` (:func:`_vector_words`) into ``float {out}[vec]``."""
    epw = 4 // _ITEMSIZE[dt]
    body = "\n".join(
        f"    {out}[{j * epw + k}] = {e};" for j in range(vec * _ITEMSIZE[dt] // 4)
        for k, e in enumerate(word_to_floats(dt, f"{src}[{j}]")))
    return f"    float {out}[{vec}];\n{body}"


def _vector_store(ptr: str, dt: str, vec: int, vals: str, stream: bool) -> str:
    """A C statement storing ``float {vals}[vec]`` as ``vec`` elements of dtype ``dt`` at vector index ``v`` of
    ``ptr`` (rounded to nearest): 8, 16 or 32 bytes; ``stream``: evict-first stores (``__stcs``)."""
    epw = 4 // _ITEMSIZE[dt]
    nwords = vec // epw
    words = [floats_to_word(dt, [f"{vals}[{j * epw + k}]" for k in range(epw)]) for j in range(nwords)]

    def put(kind: str, at: str, ws: list[str]) -> str:
        value = f"make_{kind}({', '.join(ws)})"
        target = f"reinterpret_cast<{kind}*>({ptr}) + {at}"
        return f"__stcs({target}, {value});" if stream else f"*({target}) = {value};"

    if nwords == 2:
        return put("uint2", "v", words)
    if nwords == 4:
        return put("uint4", "v", words)
    return put("uint4", "2 * v", words[:4]) + "\n    " + put("uint4", "2 * v + 1", words[4:])


_F2T = {"bf16": "__float2bfloat16({})", "f16": "__float2half({})", "f32": "{}"}


def _convert(m: RowwiseMatch, cfg: RowwiseConfig, tx: str, tw: str, tb: str, idx: str) -> str:
    """Dtype-specific helpers: scalar conversions, loading and unpacking 16-byte vectors of x (plus the
    residual's), the w and b loads, the y (and h) stores, the per-row statistics' stores."""
    vec = m.vec
    epw = 4 // _ITEMSIZE[m.dtype]  # x elements per 32-bit word
    wdt = m.w_dtype or m.dtype
    bdt = m.b_dtype or wdt
    ty, th = _CTYPE[m.out_dtype], _CTYPE[m.h_dtype or m.dtype]
    ts = [_CTYPE[m.stats[i][1]] if i < len(m.stats) else "float" for i in range(2)]
    x2f = {"bf16": "__bfloat162float(v)", "f16": "__half2float(v)", "f32": "v"}
    f2y = _F2T[m.out_dtype].format("f")

    def unpack(src: str, out: str) -> str:
        return "\n".join(
            f"    {out}[{j * epw + k}] = {e};" for j, comp in enumerate("xyzw")
            for k, e in enumerate(word_to_floats(m.dtype, f"{src}.{comp}")))

    load_x = "__ldcs" if cfg.hint == "stream" else "__ldg"
    load_r = "" if m.res_inout else load_x  # an inout residual is written by this kernel: plain loads
    if m.res:
        xv = "struct ptxf_xv { uint4 x, r; };  // x and the residual, 16 bytes each"
        unpack_body = unpack("u.x", "f") + f"\n    float g[{vec}];\n" + unpack("u.r", "g") + \
            f"\n#pragma unroll\n    for (int k = 0; k < {vec}; ++k) f[k] += g[k];  // h = x + res, fp32"

        def loader(lx: str, lr: str) -> str:
            r = f"{lr}(reinterpret_cast<const uint4*>(rr) + v)" if lr else "reinterpret_cast<const uint4*>(rr)[v]"
            return f"return ptxf_xv{{{lx}(reinterpret_cast<const uint4*>(xr) + v), {r}}};"
        x1 = "ptxf_x2f(xr[j]) + ptxf_x2f(rr[j])"
    else:
        xv = "struct ptxf_xv { uint4 x; };"
        unpack_body = unpack("u.x", "f")

        def loader(lx: str, lr: str) -> str:
            return f"return ptxf_xv{{{lx}(reinterpret_cast<const uint4*>(xr) + v)}};"
        x1 = "ptxf_x2f(xr[j])"
    load = loader(load_x, load_r)
    reload = loader("__ldg", "" if m.res_inout else "__ldg")
    stage = "ptxf_cp16(&dst->x, reinterpret_cast<const uint4*>(xr) + v);" + (
        " ptxf_cp16(&dst->r, reinterpret_cast<const uint4*>(rr) + v);" if m.res else "")
    if m.h:
        store_h = _vector_store("hr", m.h_dtype, vec, "f", False)
        store_h1 = f"hr[j] = {_F2T[m.h_dtype].format('f')};"
    else:
        store_h = store_h1 = ""
    stat_stores = " ".join(
        f"s{i}[row] = {_F2T[dt].format(STATS[stat][0])};" for i, (_, dt, stat) in enumerate(m.stats))
    w_bytes = vec * _ITEMSIZE[wdt]  # w: VEC elements of w's dtype at vector index v: 8, 16 or 32 bytes
    expr = "(f[k] - mean) * scale"
    fields, loads, unpacks = [], [], []
    for ptr, dt, out in _wb_parts(m):
        fields.append(f"unsigned {out}[{vec * _ITEMSIZE[dt] // 4}];")
        loads.append(_vector_words(ptr, dt, vec, f"u.{out}"))
        unpacks.append(_unpack_words(f"wb.{out}", dt, vec, out))
    if m.w:
        expr = f"({expr}) * g[k]"
    if m.b:
        expr = f"{expr} + h[k]"
    wb_struct = f"struct ptxf_wb {{ {' '.join(fields)} }};  // the words of w (and b) for one vector"
    load_wb = "\n".join(["    ptxf_wb u;"] + loads + ["    return u;"])
    norm_body = "\n".join(unpacks + [f"    float o[{vec}];\n#pragma unroll\n    for (int k = 0; k < {vec}; ++k) o[k] = {expr};"])
    store_y = _vector_store("yr", m.out_dtype, vec, "o", cfg.hint == "stream")
    w2f = "" if not m.w else f"static __device__ __forceinline__ float ptxf_w2f({tw} v) {{ return {x2f[wdt]}; }}\n"
    b2f = "" if not m.b else f"static __device__ __forceinline__ float ptxf_b2f({tb} v) {{ return {x2f[bdt]}; }}\n"
    return f"""
static __device__ __forceinline__ bool ptxf_aligned(const void* p, unsigned a) {{ return (reinterpret_cast<unsigned long long>(p) & (a - 1)) == 0; }}
static __device__ __forceinline__ float ptxf_x2f({tx} v) {{ return {x2f[m.dtype]}; }}
static __device__ __forceinline__ {ty} ptxf_f2y(float f) {{ return {f2y}; }}
{w2f}{b2f}{xv}
// the vector at index v of the row (x, and the residual where there is one): the first read, then re-reads of longer rows
static __device__ __forceinline__ ptxf_xv ptxf_load_xv(const {tx}* __restrict__ xr, const {tx}* rr, {idx} v) {{ {load} }}
static __device__ __forceinline__ ptxf_xv ptxf_reload_xv(const {tx}* __restrict__ xr, const {tx}* rr, {idx} v) {{ {reload} }}
// a staged cache (sm_80+): 16 bytes global -> shared without a register (cp.async, through L2 only), the wait for them all
static __device__ __forceinline__ void ptxf_cp16(void* dst, const void* src)
{{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(static_cast<unsigned>(__cvta_generic_to_shared(dst))), "l"(src) : "memory");
#else
    *static_cast<uint4*>(dst) = *static_cast<const uint4*>(src);
#endif
}}
static __device__ __forceinline__ void ptxf_stage_wait()
{{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}}
static __device__ __forceinline__ void ptxf_stage_xv(ptxf_xv* dst, const {tx}* __restrict__ xr, const {tx}* rr, {idx} v) {{ {stage} }}
static __device__ __forceinline__ void ptxf_unpack_xv(const ptxf_xv& u, float (&f)[{vec}])
{{
{unpack_body}
}}
// element j of the row as the normalisation reads it (x, or x + res)
static __device__ __forceinline__ float ptxf_x1(const {tx}* __restrict__ xr, const {tx}* rr, {idx} j) {{ return {x1}; }}
// x + res to h (nothing without an h)
static __device__ __forceinline__ void ptxf_store_h({th}* hr, {idx} v, const float (&f)[{vec}]) {{ {store_h} }}
static __device__ __forceinline__ void ptxf_store_h1({th}* hr, {idx} j, float f) {{ {store_h1} }}
// the row's statistics ({", ".join(f"{n}: {s}" for n, _, s in m.stats) or "none"}); m2: the variance (layer) or mean(x^2) (rms)
static __device__ __forceinline__ void ptxf_store_stats({ts[0]}* __restrict__ s0, {ts[1]}* __restrict__ s1, long long row,
                                                        float mean, float m2, float scale, float eps) {{ {stat_stores} }}
{wb_struct}
// w (and b) at vector index v: {w_bytes} bytes of w
static __device__ __forceinline__ ptxf_wb ptxf_load_wb(const {tw}* __restrict__ w, const {tb}* __restrict__ b, {idx} v)
{{
{load_wb}
}}
// y for one vector: ((x - mean) * scale) [* w] [+ b] in fp32, rounded once to {m.out_dtype}, w (b) as loaded
static __device__ __forceinline__ void ptxf_norm_store_wb({ty}* __restrict__ yr, {idx} v, const float (&f)[{vec}], const ptxf_wb& wb,
                                                          float mean, float scale)
{{
{norm_body}
    {store_y}
}}
// the same, w (and b) read here
static __device__ __forceinline__ void ptxf_norm_store({ty}* __restrict__ yr, {idx} v, const float (&f)[{vec}],
                                                       const {tw}* __restrict__ w, const {tb}* __restrict__ b, float mean, float scale)
{{
    ptxf_norm_store_wb(yr, v, f, ptxf_load_wb(w, b, v), mean, scale);
}}
"""
