"""The "transpose" family: an expert skeleton for a permutation of an array's axes through shared-memory tiles.

It applies to kernels whose spec reads one buffer x and writes one buffer y of the same dtype (any: elements move
as raw bits), y's shape a permutation of x's other than the identity (``y[C, R] = x[R, C]``, ``y[N, H, W, C] =
x[N, C, H, W]``, ``y[B, T, H, D] = x[B, H, T, D]``...), every dimension an integer or an expression of size symbols
each passed by an integer scalar argument, no float scalar, and ``launch.policy = "free"``. Where the kernel's
source stores into y by subscripts, each stored value must read x alone (``y[...] = x[...]``, through a local or a
cast): a kernel that also computes is not a copy. Where equal sizes make the permutation ambiguous (``[N, N]``),
each reading other than the identity is proposed (at most :data:`MAX_READINGS`); the verifier keeps the right one.

The permutation is first reduced (:func:`reduce_permutation`): x's axes that stay adjacent and in order in y are
merged into one (NCHW to NHWC is ``[N, C, HW]`` to ``[N, HW, C]``). Where x's last merged axis stays last in y,
rows of x are copied whole and reads and writes are coalesced already: no fit. Otherwise the kernel is a batched
2-D transpose: the tile's columns run along x's last axis ``a`` (contiguous in x), its rows along y's last axis
``b`` (contiguous in y); every other axis is a batch index, with its own stride in x and in y.

Each candidate is the CUDA text of :data:`_TEMPLATE`, instantiated with the user's kernel name and parameter names,
types and order, so its ``kernel_text`` drops into their file in place of the original kernel. Elements are moved
as raw bits (``unsigned char`` / ``unsigned short`` / ``unsigned`` / ``unsigned long long``): the output is
bit-identical to any correct permutation (NaN payloads included).

Kernel design: one block per ``tile x tile`` tile of one batch's ``[b, a]`` plane (a 1-D grid, tile column fastest,
then tile row, then the batch: no grid.y, so no 65535 limit); ``block = 32 x rows`` threads. Phase 1 reads the tile
row by row (each thread ``vec`` bytes per access, a warp covers ``32 x vec`` contiguous bytes of a row, all of a
thread's loads issued before its shared-memory stores) into ``tile[t][t + pad]``; after one barrier, phase 2 reads
the tile column-wise from shared memory and writes y rows with the same vector width. The padding (one element)
shifts each tile row by one bank, so the column reads of phase 2 hit distinct banks. Vector accesses need aligned
pointers and ``|a|`` (reads) or ``|b|`` (writes) divisible by the vector width (every other stride of that side is a
multiple of it); each side checks its own condition at run time and falls back to one element per access, so odd
sides, one row or one column all work.

Knobs (``params``): ``tile`` (32 or 64), ``rows`` (block rows: block = 32 x rows threads),
``pad`` (0 or 1 element per shared-memory row), ``vec`` (bytes per global access: 4 or 16, rounded
up to one element), ``block`` (= 32 x rows, the shared knob name for threads per block), and, where the
permutation is ambiguous, ``perm`` (x's axis of each of y's, comma-separated).
"""
from __future__ import annotations

import itertools
import re
import string
from dataclasses import dataclass

from ptxfactory.harness.static_checks import MAX_GRID_DIMS
from ptxfactory.protocol import Candidate, ExprError, KernelSpec, evaluate, symbols_in, to_c

from ..base import (GenContext, NoFit, family_candidate, family_candidates, fit_check, kernel_linkage, render_params,
                    shape_dims, stored_values, pointer_aliases, pointer_declaration)

_RAW = {1: "unsigned char", 2: "unsigned short", 4: "unsigned", 8: "unsigned long long"}
_VT = {4: "unsigned", 8: "uint2", 16: "uint4"}
MAX_AXES = 6  # axes of x whose permutations are enumerated (6! = 720 at most)
MAX_READINGS = 2  # permutations proposed where equal sizes leave several (an [N, N] transpose has one)


@dataclass(frozen=True)
class TransposeMatch:
    """How a spec maps onto a batched transpose ``y[..., a, ..., b] = x[..., b, ..., a]`` after merging axes.

    Sizes and strides are spec expressions (size symbols); ``names`` maps each symbol to the scalar argument that
    passes it. ``rows`` = |b| (y's contiguous axis), ``cols`` = |a| (x's contiguous axis), ``x_row_stride`` = b's
    stride in x, ``y_row_stride`` = a's stride in y (elements); ``batch`` = (size, x stride, y stride) of every
    other merged axis, in y's order; ``perm[j]`` = x's axis that is y's axis ``j``; ``itemsize`` in bytes."""

    x: str
    y: str
    dtype: str
    itemsize: int
    rows: str
    cols: str
    x_row_stride: str
    y_row_stride: str
    batch: tuple[tuple[str, str, str], ...]
    perm: tuple[int, ...]
    names: tuple[tuple[str, str], ...]
    ambiguous: bool = False


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

    def elems(self, itemsize: int) -> int:
        """Elements per vector access (at least 1) for elements of ``itemsize`` bytes."""
        return max(1, self.vec // itemsize)

    def valid(self, itemsize: int) -> bool:
        """Every thread has at least one vector per phase: ``threads x elems <= tile^2``."""
        return self.threads * self.elems(itemsize) <= self.tile * self.tile and self.tile % 32 == 0

    @property
    def min_blocks(self) -> int:
        """Blocks per SM promised to ptxas (``__launch_bounds__`` 2nd argument): caps registers at 64."""
        return max(1, 1024 // self.threads)

    def smem_bytes(self, itemsize: int) -> int:
        return self.tile * (self.tile + self.pad) * itemsize

    def params(self) -> dict:
        return {"tile": self.tile, "rows": self.rows, "block": self.threads, "pad": self.pad, "vec": self.vec}


def _product(dims) -> str:
    """The spec expression of a product of dimensions (``"1"`` for none, a single one as it is)."""
    if len(dims) == 1:
        return str(dims[0])
    return " * ".join(f"({d})" if isinstance(d, str) and not d.isidentifier() else str(d) for d in dims) or "1"


def _norm(d) -> str:
    """A dimension as compared between x and y: its text without any whitespace (``2*H`` is ``2 * H``)."""
    return re.sub(r"\s+", "", str(d))


def permutations(xd: tuple, yd: tuple) -> list[tuple[int, ...]]:
    """Every ``perm`` other than the identity with ``yd[j] == xd[perm[j]]`` for each of y's axes ``j`` (dimensions
    compared as the spec writes them, whitespace ignored). Raises :class:`NoFit` above :data:`MAX_AXES` axes."""
    xs, ys = [_norm(d) for d in xd], [_norm(d) for d in yd]
    if len(xs) != len(ys) or sorted(xs) != sorted(ys) or xs == ys and len(set(xs)) == len(xs):
        return []
    if len(xs) > MAX_AXES:
        raise NoFit(f"{len(xs)} axes: the skeleton enumerates permutations of at most {MAX_AXES}")
    ident = tuple(range(len(xs)))
    return [p for p in itertools.permutations(ident) if p != ident and all(ys[j] == xs[i] for j, i in enumerate(p))]


def reduce_permutation(perm: tuple[int, ...]) -> tuple[list[list[int]], list[int]]:
    """x's axes merged where they stay adjacent and in order in y: ``(groups, order)``, the groups in x's order (each
    a run of x's axes) and ``order[j]`` the group that is y's ``j``-th. ``(0, 2, 3, 1)`` (NCHW to NHWC) gives
    ``([[0], [1], [2, 3]], [0, 2, 1])``."""
    runs: list[list[int]] = []
    for j, i in enumerate(perm):
        if runs and perm[j - 1] + 1 == i:
            runs[-1].append(i)
        else:
            runs.append([i])
    groups = sorted(runs)
    return groups, [groups.index(r) for r in runs]


def _reading(xd: tuple, perm: tuple[int, ...]) -> tuple[str, str, str, str, tuple] | None:
    """(rows, cols, x row stride, y row stride, batch) of a permutation, as spec expressions; None where x's last
    merged axis stays last in y (no transpose to do)."""
    groups, order = reduce_permutation(perm)
    if order[-1] == len(groups) - 1:
        return None
    size = [_product([xd[i] for i in g]) for g in groups]
    x_stride = [_product(size[g + 1:]) for g in range(len(groups))]
    y_stride = [""] * len(groups)
    for pos, g in enumerate(order):
        y_stride[g] = _product([size[h] for h in order[pos + 1:]])
    a, b = len(groups) - 1, order[-1]
    batch = tuple((size[g], x_stride[g], y_stride[g]) for g in order if g not in (a, b))
    return size[b], size[a], x_stride[b], y_stride[a], batch


def grid_expr(m: TransposeMatch, cfg: TransposeConfig) -> str:
    """One block per tile of each batch: ``cdiv(rows, tile) * cdiv(cols, tile)`` times the batch sizes (the kernel
    splits blockIdx.x the same way), at least one."""
    wrap = lambda e: e if e.isidentifier() else f"({e})"  # noqa: E731
    grid = " * ".join([f"cdiv({m.rows}, {cfg.tile}) * cdiv({m.cols}, {cfg.tile})"] + [wrap(size) for size, _, _ in m.batch])
    return f"max(1, {grid})"  # an empty array still launches one block, which returns at once


@fit_check
def match_spec(spec: KernelSpec) -> list[TransposeMatch] | None:
    """The readings of ``spec`` as a permutation of axes (one, or :data:`MAX_READINGS` where equal sizes leave
    several), or None when the spec does not have the pattern (or its launch is fixed)."""
    bufs = [a for a in spec.args if a.is_buffer]
    scalars = [a for a in spec.args if not a.is_buffer]
    ins = [a for a in bufs if a.role == "in"]
    outs = [a for a in bufs if a.role == "out"]
    if len(bufs) != 2 or len(ins) != 1 or len(outs) != 1:
        roles = ", ".join(f"{a.name} ({a.role})" for a in bufs)
        raise NoFit(f"its buffers are {roles}: the skeleton takes one input and one output")
    x, y = ins[0], outs[0]
    if x.dtype != y.dtype:
        raise NoFit(f"the output {y.name} is {y.dtype.value}, the input {x.name} {x.dtype.value}: a permutation keeps the dtype")
    floats = [a.name for a in scalars if a.dtype.is_float]
    if floats:
        raise NoFit(f"it takes the float scalar {floats[0]}: a permutation of axes takes sizes only")
    # axes of extent 1 (a literal 1) do not change where an element lies: [A, 1] -> [1, A] is a copy in memory
    xd = tuple(d for d in shape_dims(x.shape) if _norm(d) != "1")
    yd = tuple(d for d in shape_dims(y.shape) if _norm(d) != "1")
    perms = permutations(xd, yd)
    if not perms:
        raise NoFit(f"the output {y.name} {list(shape_dims(y.shape))} is not a permutation of the input {x.name}'s axes "
                    f"{list(shape_dims(x.shape))} other than the identity (axes of extent 1 aside)")
    names: dict[str, str] = {}
    for d in xd:
        for sym in symbols_in(d) if isinstance(d, str) else ():
            found = [a for a in scalars if isinstance(a.value, str) and a.value.strip() == sym]
            if not found:
                raise NoFit(f"no integer scalar passes the size {sym} of {x.name} (the kernel computes its strides from it)")
            names[sym] = found[0].name  # several pass it (a size and a leading dimension): any one has its value
    readings = [(p, r) for p in perms if (r := _reading(xd, p)) is not None]
    if not readings:
        raise NoFit(f"{x.name}'s last axis stays last in {y.name}: rows are copied whole, reads and writes coalesce already")
    if len(readings) > MAX_READINGS:
        raise NoFit(f"{len(readings)} permutations of {x.name}'s axes give {y.name}'s shape (equal sizes): at most {MAX_READINGS} are tried")
    out = []
    for perm, (rows, cols, xs, ys, batch) in readings:
        try:
            for e in (rows, cols, xs, ys, *(v for t in batch for v in t)):
                to_c(e, names)
        except ExprError as exc:
            raise NoFit(f"a size of {x.name} has no C form: {exc}") from None
        out.append(TransposeMatch(x=x.name, y=y.name, dtype=x.dtype.value, itemsize=x.dtype.itemsize, rows=rows,
                                  cols=cols, x_row_stride=xs, y_row_stride=ys, batch=batch, perm=perm,
                                  names=tuple(sorted(names.items())), ambiguous=len(perms) > 1))
    return out


def grid_fits(spec: KernelSpec, m: TransposeMatch, cfg: TransposeConfig) -> bool:
    """Whether the configuration's grid is within the hardware's 2^31 - 1 blocks at every size the spec lists."""
    for size in spec.check.sizes + spec.bench.sizes:
        try:
            if evaluate(grid_expr(m, cfg), size) > MAX_GRID_DIMS[0]:
                return False
        except ExprError:
            return False
    return True


_LOAD_CALLS = ("__ldg", "__ldcs", "__ldca", "__ldcg", "__ldlu", "__ldcv")  # a load through a cache hint: a copy


def _blank(text: str, opener: str, closer: str, keep: str) -> str:
    """``text`` with every balanced ``opener ... closer`` group after a match of the regex ``keep`` replaced by
    ``keep``'s text and an empty pair (``x[i + 1]`` -> ``x[]``)."""
    out, i = [], 0
    for m in re.finditer(keep, text):
        if m.start() < i:
            continue
        j, depth = m.end(), 1
        while j < len(text) and depth:
            depth += (text[j] == opener) - (text[j] == closer)
            j += 1
        out += [text[i:m.end()], closer]
        i = j
    return "".join(out) + text[i:]


def _addresses_blanked(expr: str) -> str:
    """``expr`` with what only locates an element left out: subscripts' contents, load calls' arguments, a
    dereference's address (``x[k * b + j]`` -> ``x[]``, ``*(x + i)`` -> ``ptxf_deref``)."""
    t = _blank(expr, "[", "]", r"\[")
    t = _blank(t, "(", ")", rf"\b(?:{'|'.join(_LOAD_CALLS)})\s*\(")
    return re.sub(r"(?:^|(?<=[\s(=,]))\*\s*\(\)", "ptxf_deref", _blank(t, "(", ")", r"(?:^|(?<=[\s(=,]))\*\s*\("))


def _computes(expr: str, element_types: tuple[str, ...]) -> str | None:
    """What ``expr`` computes beyond moving an element (an operator, a call, a cast to another type), or None for a
    load (``x[...]``, ``__ldg(...)``, ``*(x + i)``), a name, or a cast to the element's own type. Index arithmetic
    does not count: the contents of subscripts, load calls and dereferences are left out."""
    t = _addresses_blanked(expr)
    for cast in re.finditer(r"\(\s*(?:const\s+)?([A-Za-z_][\w\s]*?)\s*\)|static_cast\s*<\s*(?:const\s+)?([\w\s]+?)\s*>", t):
        ctype = " ".join((cast.group(1) or cast.group(2)).split())
        if ctype not in element_types and (cast.group(2) or re.fullmatch(r"[A-Za-z_]\w*(\s+\w+)*", ctype) and
                                           (ctype in _C_NAMES or ctype.endswith("_t") or " " in ctype)):
            return f"a cast to {ctype}"
    t = re.sub(r"static_cast\s*<[^>]*>", "", t)
    call = re.search(r"\b(?!(?:" + "|".join(_LOAD_CALLS) + r")\b)([A-Za-z_]\w*)\s*\(", t)
    if call:
        return f"a call to {call.group(1)}"
    op = re.search(r"[-+/%&|^~!<>?:,]|(?<![\s(=,])\*|\*(?!\s*\()", t)
    if op:
        return f"the operator {op.group(0)!r}"
    return None


_C_NAMES = frozenset({"float", "double", "int", "unsigned", "char", "short", "long", "bool", "signed", "half", "__half",
                      "__nv_bfloat16", "nv_bfloat16", "size_t"})


def copy_refusal(kernel_text: str, m: TransposeMatch, element_types: tuple[str, ...] = ()) -> str | None:
    """Why the kernel's stores into y are not copies of x, or None where each stored value that the source shows
    (``y[...] = v;``, :func:`~ptxfactory.search.base.stored_values`, with the definitions of the names it reads) only
    moves an element: a load, a name, a cast to the element's own type (``element_types``: its C spellings). Refused:
    an operator or call on the value (``x[j] + 1``, ``fmaxf(x[j], 0)``, ``v = fabsf(v)``), a cast to another type
    (``(int)x[j]``), a compound assignment or increment of y (``y[i] += x[j]``). Index arithmetic is not looked at:
    the verifier judges where an element comes from."""
    code = re.sub(r"//[^\n]*|/\*.*?\*/", " ", kernel_text, flags=re.S)
    # a pointer into y (float* out = y + row * N;): its stores are y's, judged alike (a softmax stored through one
    # once read as a copy: nothing was stored "into y")
    aliases = pointer_aliases(code, m.y)
    uses = re.sub(pointer_declaration(m.y), " ", code)
    for a in aliases:
        if re.search(rf"\*\s*\(?\s*{re.escape(a)}\b|(?<![\w.]){re.escape(a)}\s*(?:\+\+|--|[-+]=)|(?:\+\+|--)\s*{re.escape(a)}\b", uses):
            return f"it writes {m.y} through the pointer {a}, moved or dereferenced: its stores cannot be read"
    for name in [m.y, *aliases]:
        why = _stores_refusal(code, kernel_text, name, m, element_types)
        if why:
            return why
    return None


def _stores_refusal(code: str, kernel_text: str, out: str, m: TransposeMatch, element_types: tuple[str, ...]) -> str | None:
    """:func:`copy_refusal`'s judgement of the stores ``out[...] = v;`` (``out``: y or a pointer into it)."""
    y = re.escape(out)
    if re.search(rf"(?<![\w.]){y}\s*\[[^;]*?\]\s*(?:[-+*/%&|^]|<<|>>)=|(?:\+\+|--)\s*{y}\s*\[|(?<![\w.]){y}\s*\[[^;]*?\]\s*(?:\+\+|--)", code):
        return f"it updates {m.y} in place (a compound assignment or an increment): not a plain copy of {m.x}"
    for value in stored_values(kernel_text, out):
        stored = value.split(" ; ")[0].strip()
        why = _computes(stored, element_types)
        if why:
            return f"it stores {stored!r} into {m.y}: {why}, not a plain copy of {m.x}"
        # the names the value itself reads (not its indices'): each definition of theirs must move an element too
        for name in set(re.findall(r"(?<![\w.])([A-Za-z_]\w*)(?!\s*[\w(\[])", _addresses_blanked(stored))):
            for d in re.finditer(rf"(?<![\w.]){re.escape(name)}\s*([-+*/]?)=(?!=)\s*([^;]*);", code):
                why = "a compound assignment" if d.group(1) else _computes(d.group(2).strip(), element_types)
                if why:
                    return (f"it stores {stored!r} into {m.y}, and {name} = {d.group(2).strip()!r}: {why}, "
                            f"not a plain copy of {m.x}")
    return None


def tuning_space(itemsize: int) -> list[TransposeConfig]:
    """``tile x rows x pad x vec`` over (32, 64) x (8, 16) x (1, 0) x (4, 16), in product order (the padded
    tile first: the textbook default), without the configurations that leave threads idle
    (:meth:`TransposeConfig.valid`): 14 for 4-byte elements, 12 for 2-byte ones."""
    space = itertools.product((32, 64), (8, 16), (1, 0), (4, 16))
    return [c for c in (TransposeConfig(*p) for p in space) if c.valid(itemsize)]


class TransposeFamily:
    """Expert shared-memory tiled (batched) transpose: 12-14 instances over tile, block rows, padding and vector
    width, for each reading of the permutation."""

    name = "transpose"

    def _matches(self, ctx: GenContext) -> tuple[list[TransposeMatch], str | None]:
        ms = match_spec(ctx.spec)
        if not ms:
            return [], match_spec.why(ctx.spec)
        x = next(a for a in ctx.spec.args if a.name == ms[0].x)
        why = copy_refusal(ctx.kernel.text, ms[0], x.dtype.c_types)
        return ([], why) if why else (ms, None)

    def why_not(self, ctx: GenContext) -> str | None:
        """Why the skeleton does not fit ``ctx``'s spec or source (None where it does; what no family takes, a template
        or a signature unlike the spec, is :func:`~ptxfactory.search.base.kernel_refusal`'s)."""
        return self._matches(ctx)[1]

    def propose(self, ctx: GenContext) -> list[Candidate]:
        ms, _ = self._matches(ctx)
        configs = [(m, cfg) for m in ms for cfg in tuning_space(m.itemsize) if grid_fits(ctx.spec, m, cfg)]
        return family_candidates(ctx, bool(ms), configs, lambda mc: self.instantiate(ctx, *mc))

    def instantiate(self, ctx: GenContext, m: TransposeMatch, cfg: TransposeConfig) -> Candidate:
        """The candidate for one configuration (the spec must match: ``m`` one of ``match_spec(ctx.spec)``)."""
        text = render_kernel(ctx, m, cfg)
        batch = f" batch={'x'.join(size for size, _, _ in m.batch)}" if m.batch else ""
        perm = f" perm={','.join(map(str, m.perm))}" if m.ambiguous else ""
        desc = (
            f"transpose tile={cfg.tile} block=32x{cfg.rows} pad={cfg.pad} vec={cfg.vec}B{batch}{perm} "
            f"({cfg.tile * cfg.tile // cfg.threads} elements/thread)"
        )
        params = cfg.params() | ({"perm": ",".join(map(str, m.perm))} if m.ambiguous else {})
        return family_candidate(ctx, self.name, text, grid_expr(m, cfg), cfg.threads, desc, params)


_TEMPLATE = string.Template("""\
// ptxfactory "transpose" family: ${WHAT}, ${DTYPE} moved as raw ${ES}-byte words.
// One block per ${T} x ${T} tile of a batch's [b, a] plane (blockIdx.x = (batch * tile rows + tile row) * tiles per
// row + tile column), ${THREADS} threads. Phase 1: each thread reads VR elements (one ${VB}-byte vector when
// |a| % ${V} == 0 and x is aligned, else one element) per tile row it owns, all loads before the shared-memory stores.
// Phase 2, after one barrier: each thread gathers VW elements down a tile column (VW consecutive y elements) and
// writes them with one store (vectorised when |b| % ${V} == 0 and y is aligned). Shared rows are padded by ${PAD}
// element(s) against bank conflicts on the column reads.
${HELPERS}
template <int ptxf_VR, int ptxf_VW>
static __device__ __forceinline__ void ptxf_transpose_tile(const ${E}* __restrict__ ptxf_x, ${E}* __restrict__ ptxf_y,
                                                           long long ptxf_R, long long ptxf_C, long long ptxf_xs, long long ptxf_ys,
                                                           long long ptxf_r0, long long ptxf_c0, ${E} (*ptxf_tile)[${T} + ${PAD}])
{
    constexpr int ptxf_NVR = ${T} / ptxf_VR, ptxf_RPR = ${THREADS} / ptxf_NVR, ptxf_PR = ${T} / ptxf_RPR;  // phase 1: vectors per row, rows per pass, passes
    constexpr int ptxf_NVW = ${T} / ptxf_VW, ptxf_RPW = ${THREADS} / ptxf_NVW, ptxf_PW = ${T} / ptxf_RPW;  // phase 2: the same over y rows
    static_assert(${THREADS} % ptxf_NVR == 0 && ${T} % ptxf_RPR == 0 && ${THREADS} % ptxf_NVW == 0 && ${T} % ptxf_RPW == 0, "bad tiling");
    const int ptxf_t = threadIdx.x;
    const int ptxf_cr = (ptxf_t % ptxf_NVR) * ptxf_VR, ptxf_rr = ptxf_t / ptxf_NVR;  // phase 1: first tile column, first tile row
    const long long ptxf_rows_left = ptxf_R - (ptxf_r0 + ptxf_rr);     // rows of the plane from this thread's first (may be <= 0)
    const int ptxf_nr = ptxf_rows_left < ${T} ? (int)ptxf_rows_left : ${T};
    const bool ptxf_col_ok = ptxf_c0 + ptxf_cr < ptxf_C;              // c0 + cr < C and C % VR == 0: the whole vector is in the row
    const ${E}* __restrict__ ptxf_xp = ptxf_x + ((ptxf_r0 + ptxf_rr) * ptxf_xs + ptxf_c0 + ptxf_cr);
    const long long ptxf_xstep = (long long)ptxf_RPR * ptxf_xs;
    ${E} ptxf_buf[ptxf_PR][ptxf_VR];
#pragma unroll
    for (int ptxf_p = 0; ptxf_p < ptxf_PR; ++ptxf_p)
        if (ptxf_col_ok && ptxf_p * ptxf_RPR < ptxf_nr) ptxf_load(ptxf_xp + ptxf_p * ptxf_xstep, ptxf_buf[ptxf_p]);
#pragma unroll
    for (int ptxf_p = 0; ptxf_p < ptxf_PR; ++ptxf_p) {
        if (ptxf_col_ok && ptxf_p * ptxf_RPR < ptxf_nr) {
#pragma unroll
            for (int ptxf_j = 0; ptxf_j < ptxf_VR; ++ptxf_j) ptxf_tile[ptxf_rr + ptxf_p * ptxf_RPR][ptxf_cr + ptxf_j] = ptxf_buf[ptxf_p][ptxf_j];
        }
    }
    __syncthreads();
    const int ptxf_rw = (ptxf_t % ptxf_NVW) * ptxf_VW, ptxf_cw = ptxf_t / ptxf_NVW;  // phase 2: first tile row (= y column), first tile column (= y row)
    const long long ptxf_ycols_left = ptxf_C - (ptxf_c0 + ptxf_cw);    // y rows from this thread's first
    const int ptxf_nc = ptxf_ycols_left < ${T} ? (int)ptxf_ycols_left : ${T};
    const bool ptxf_row_ok = ptxf_r0 + ptxf_rw < ptxf_R;              // r0 + rw < R and R % VW == 0: the whole vector is in the y row
    ${E}* __restrict__ ptxf_yp = ptxf_y + ((ptxf_c0 + ptxf_cw) * ptxf_ys + ptxf_r0 + ptxf_rw);
    const long long ptxf_ystep = (long long)ptxf_RPW * ptxf_ys;
#pragma unroll
    for (int ptxf_p = 0; ptxf_p < ptxf_PW; ++ptxf_p) {
        if (ptxf_row_ok && ptxf_p * ptxf_RPW < ptxf_nc) {
            const int ptxf_c = ptxf_cw + ptxf_p * ptxf_RPW;
            ${E} ptxf_e[ptxf_VW];
#pragma unroll
            for (int ptxf_j = 0; ptxf_j < ptxf_VW; ++ptxf_j) ptxf_e[ptxf_j] = ptxf_tile[ptxf_rw + ptxf_j][ptxf_c];
            ptxf_store(ptxf_yp + ptxf_p * ptxf_ystep, ptxf_e);
        }
    }
}
}  // extern "C++"

// Launch: grid (${GRID},), block (${THREADS},), no dynamic shared memory (${SMEM} B static).
${LINKAGE}__global__ void __launch_bounds__(${THREADS}, ${MINB}) ${KERNEL}(${PARAMS})
{
    __shared__ ${E} ptxf_tile[${T}][${T} + ${PAD}];
    const long long ptxf_R = ${R}, ptxf_C = ${C};  // |b| (y's contiguous axis), |a| (x's)
    const long long ptxf_xs = ${XS}, ptxf_ys = ${YS};  // b's stride in x, a's in y
    if (ptxf_R <= 0 || ptxf_C <= 0${EMPTY}) return;  // an empty array: nothing to move (the grid is one block)
    const long long ptxf_ntc_ = (ptxf_C + ${T} - 1) / ${T}, ptxf_ntr_ = (ptxf_R + ${T} - 1) / ${T};
    const unsigned ptxf_ntc = ptxf_ntc_ > 0 ? (unsigned)ptxf_ntc_ : 1u;  // tiles per tile row
    const unsigned ptxf_ntr = ptxf_ntr_ > 0 ? (unsigned)ptxf_ntr_ : 1u;  // tile rows per plane
    unsigned ptxf_b = blockIdx.x;
    const long long ptxf_c0 = (long long)(ptxf_b % ptxf_ntc) * ${T};
    ptxf_b /= ptxf_ntc;
    const long long ptxf_r0 = (long long)(ptxf_b % ptxf_ntr) * ${T};
    ptxf_b /= ptxf_ntr;
    long long ptxf_xo = 0, ptxf_yo = 0;  // the batch's offsets in x and y (elements)
${BATCH}
    const ${E}* ptxf_x = reinterpret_cast<const ${E}*>(${X}) + ptxf_xo;
    ${E}* ptxf_y = reinterpret_cast<${E}*>(${Y}) + ptxf_yo;
${DISPATCH}
}
""")


def _helpers(m: TransposeMatch, cfg: TransposeConfig) -> str:
    """Raw-word loads and stores of 1 and ``V`` elements (overloaded on the array length); every name ``ptxf_``'s, so
    no macro of the user's file (``#define p 3``) reaches into them."""
    e = _RAW[m.itemsize]
    v = cfg.elems(m.itemsize)
    out = [
        f"static __device__ __forceinline__ void ptxf_load(const {e}* __restrict__ ptxf_p, {e} (&ptxf_e)[1]) {{ ptxf_e[0] = __ldg(ptxf_p); }}",
        f"static __device__ __forceinline__ void ptxf_store({e}* __restrict__ ptxf_p, const {e} (&ptxf_e)[1]) {{ *ptxf_p = ptxf_e[0]; }}",
    ]
    if v > 1:
        vt = _VT[v * m.itemsize]
        out += [
            f"union ptxf_vec {{ {vt} ptxf_u; {e} ptxf_e[{v}]; }};  // {v} elements as one {v * m.itemsize}-byte word",
            f"static __device__ __forceinline__ void ptxf_load(const {e}* __restrict__ ptxf_p, {e} (&ptxf_e)[{v}])\n{{\n"
            f"    ptxf_vec ptxf_w;\n    ptxf_w.ptxf_u = __ldg(reinterpret_cast<const {vt}*>(ptxf_p));\n"
            f"#pragma unroll\n    for (int ptxf_i = 0; ptxf_i < {v}; ++ptxf_i) ptxf_e[ptxf_i] = ptxf_w.ptxf_e[ptxf_i];\n}}",
            f"static __device__ __forceinline__ void ptxf_store({e}* __restrict__ ptxf_p, const {e} (&ptxf_e)[{v}])\n{{\n"
            f"    ptxf_vec ptxf_w;\n#pragma unroll\n    for (int ptxf_i = 0; ptxf_i < {v}; ++ptxf_i) ptxf_w.ptxf_e[ptxf_i] = ptxf_e[ptxf_i];\n"
            f"    *reinterpret_cast<{vt}*>(ptxf_p) = ptxf_w.ptxf_u;\n}}",
        ]
    return "\n".join(out)


def _batch(m: TransposeMatch) -> str:
    """The batch index (what is left of blockIdx.x) taken apart over the batch axes, innermost (y's last) first."""
    names = dict(m.names)
    lines = []
    for i, (size, xs, ys) in reversed(list(enumerate(m.batch))):
        last = i == 0
        idx = "ptxf_b" if last else f"(ptxf_b % (unsigned){to_c(size, names)})"
        lines.append(f"    ptxf_xo += (long long){idx} * {to_c(xs, names)};")
        lines.append(f"    ptxf_yo += (long long){idx} * {to_c(ys, names)};")
        if not last:
            lines.append(f"    ptxf_b /= (unsigned){to_c(size, names)};")
    return "\n".join(lines)


def _dispatch(m: TransposeMatch, cfg: TransposeConfig) -> str:
    v = cfg.elems(m.itemsize)
    args = "ptxf_x, ptxf_y, ptxf_R, ptxf_C, ptxf_xs, ptxf_ys, ptxf_r0, ptxf_c0, ptxf_tile"
    if v == 1:
        return f"    ptxf_transpose_tile<1, 1>({args});"
    vb = v * m.itemsize
    return (
        f"    const bool ptxf_rv = ptxf_C % {v} == 0 && reinterpret_cast<unsigned long long>({m.x}) % {vb} == 0;  // vector reads\n"
        f"    const bool ptxf_wv = ptxf_R % {v} == 0 && reinterpret_cast<unsigned long long>({m.y}) % {vb} == 0;  // vector writes\n"
        f"    if (ptxf_rv && ptxf_wv) ptxf_transpose_tile<{v}, {v}>({args});\n"
        f"    else if (ptxf_rv) ptxf_transpose_tile<{v}, 1>({args});\n"
        f"    else if (ptxf_wv) ptxf_transpose_tile<1, {v}>({args});\n"
        f"    else ptxf_transpose_tile<1, 1>({args});"
    )


def _what(m: TransposeMatch) -> str:
    """The operation in one comment line: ``y[C, R] = x[R, C]`` or the batched form with its permutation (the spec's
    expressions on one line: a newline in one would end the comment)."""
    one = lambda e: " ".join(str(e).split())  # noqa: E731
    if not m.batch and m.x_row_stride == m.cols and m.y_row_stride == m.rows:
        return f"{m.y}[{one(m.cols)}, {one(m.rows)}] = {m.x}[{one(m.rows)}, {one(m.cols)}]"
    return f"{m.y} = {m.x} with its axes permuted ({', '.join(map(str, m.perm))}): a batched transpose"


def render_kernel(ctx: GenContext, m: TransposeMatch, cfg: TransposeConfig) -> str:
    """The kernel text (helpers + ``__global__`` definition) for one configuration, in the user's signature.

    Raises ``ValueError`` for a configuration that leaves threads idle (see :meth:`TransposeConfig.valid`).
    """
    if not cfg.valid(m.itemsize) or cfg.vec not in _VT or cfg.pad < 0:
        raise ValueError(f"bad transpose configuration {cfg} for {m.dtype}")
    names = dict(m.names)
    v = cfg.elems(m.itemsize)
    body = _TEMPLATE.substitute(
        WHAT=_what(m), DTYPE=m.dtype, ES=m.itemsize, E=_RAW[m.itemsize], T=cfg.tile, PAD=cfg.pad,
        THREADS=cfg.threads, V=v, VB=v * m.itemsize, HELPERS=_helpers(m, cfg), MINB=cfg.min_blocks,
        GRID=grid_expr(m, cfg), SMEM=cfg.smem_bytes(m.itemsize), LINKAGE=kernel_linkage(ctx.kernel), KERNEL=ctx.kernel.name,
        PARAMS=render_params(ctx.kernel), R=to_c(m.rows, names), C=to_c(m.cols, names), XS=to_c(m.x_row_stride, names),
        YS=to_c(m.y_row_stride, names), BATCH=_batch(m), X=m.x, Y=m.y, DISPATCH=_dispatch(m, cfg),
        EMPTY="".join(f" || {to_c(size, names)} <= 0" for size, _, _ in m.batch),
    )
    return 'extern "C++" {\n' + body
