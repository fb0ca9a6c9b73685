"""The "transform" generator: semantics-preserving source passes on the parent kernel's syntax tree.

Unlike a family, which instantiates a skeleton, ``transform`` edits the parent's own kernel
(``ctx.original``: the user's kernel or any later candidate) through tree-sitter-cuda, pass by pass
(one module each):

===================  ========================================================================  =====
pass                 what it does                                                              exact
===================  ========================================================================  =====
``restrict``         ``__restrict__`` on pointer parameters, ``const`` on read-only pointees  yes
``promote``          an element a loop updates at one fixed index (``y[r] += ...``) -> a        yes
                     register for the loop, stored once after it (rowpar, smem_tile then see a sum)
``ldg``              reads of read-only inputs through ``__ldg``                               yes
``ldg_na``           ... through inline PTX ``ld.global.nc.L1::no_allocate``                   yes
``stream``           ... through ``__ldcs``, stores to write-only outputs through ``__stcs``   yes
``fast_math``        ``__expf``, ``tanh.approx.f32``, ``rsqrtf``, ``__fdividef`` (tolerance)    no
``grid_reduce``      one element per thread into a block's tree sum and one atomic -> each      no (sums)
                     thread folds its elements a grid's stride apart, grid capped at one wave
``shuffle_reduce``   shared-memory tree reduction -> warp shuffles + one cross-warp step       no (sums)
``online_softmax``   a max loop then an exp-sum loop over the same elements -> one online        no (sums)
                     (max, sum) loop: the elements read once; rowpar then merges lanes' parts
``fuse_moments``     a sum loop then a squared-deviation loop over the same elements -> one     no (sums)
                     Welford loop (the elements read once; rowpar then merges lanes' parts)
``collapse``         perfectly nested map loops of a one-thread-per-row kernel (heads, then     yes
                     half a head) -> one loop over both, so rowpar splits (and sizes lanes
                     for) H * D/2 iterations a row; only where rowpar then splits it
``fold``             the row's last loop, a map (heads of a token), onto the grid's y: a thread   yes
                     per (row, iteration); rowpar then splits the body's loop (group "nest",
                     collapse's alternative)
``rowpar_*``         one thread per row -> L lanes per row (sub-warp, warp, block); loops split  no (sums)
                     across lanes, accumulations (sum, max, min, arg max) combined by shuffles
``rowpar_cluster*``  rowpar with a thread block cluster of C (2-16) blocks of 1024 per row: few    no (sums)
                     long rows; blocks' parts combined through distributed shared memory
``scan_*``           a running accumulation stored per element (a prefix sum, running max), one   no (float
                     thread per row -> a warp or a block per row, chunks scanned by shuffles    sums)
``colpar_*``         one thread per column -> a 2-D block, columns on x, the column's loop     no (sums)
                     split over y; accumulations combined in shared memory, in order
``blockrow_*``       one block per row (shared-memory tree reductions) -> L lanes per row, rows  no (sums)
                     per block; the reductions by shuffles, the shared arrays gone;
                     ``blockrow_cluster*``: a cluster of C (2-16) blocks of 1024 per row (few
                     rows; a kernel launched as one block is one row), combined through
                     distributed shared memory
``hold_row_*``       a row that several lane-strided loops read: read once into registers       yes
                     (8/16/32 elements per lane, or auto from the spec's sizes), else original
``smem_tile_*``      one thread per output of an inner-product loop -> 16x16 threads, RxR      yes
                     outputs each (1, 2, 4, 8), operand tiles staged in shared memory
``mma_tile_*``       the same loop, a float sum of (row load) x (column load), on the tensor     no (sums)
                     cores: 8 warps of mma.sync (bf16/f16 m16n8k16; float as 3xTF32, or one
                     TF32 product where rtol >= 5e-4), 64x128 / 128x64 / 64x64 outputs a block
``vectorize``        one thread per 16 bytes (of the widest element): 16/8-byte accesses, tail  yes
``vector_loops``     lane-strided row loops (rowpar's, block per row): VEC elements per lane     no (sums)
                     and step, 16-byte loads/stores, scalar head/tail, uniform alignment check
``grid_stride``      one thread per element -> grid-stride loop, grid capped at one wave (SMs)  yes
``coarsen_*``        one thread per element -> K (4, 8) per thread, blockDim.x apart, grid / K  yes
``vectorize_x``      VEC consecutive x a thread: accesses at base + x (locals inlined) 16-byte    yes
                     vectors, the rest scalar per element; split layouts (x[r*2H + H + c])
``coarsen_outer_*``  a 2-D/3-D launch -> K (4, 8) consecutive outer-axis indices a thread      yes
                     (rows, or unflatten's planes), the outer grid extent / K; ``coarsen_y_*``
                     the y of a 3-D launch (a convolution's output rows: shared input rows)
``unflatten``        a flat index taken apart by / and % -> a 2-D/3-D launch over its digits    yes
                     (smem_tile reads a flattened batched GEMM through it)
``atomic_agg``       atomics to a warp-uniform address -> a register per thread, one atomic     no (float
                     per warp (lane 0, after shuffles); after grid_stride, one per warp in all  sums)
``smem_hist``        a histogram's global atomics (B bins, from the spec) -> a shared-memory    no (float
                     copy per block, merged with one atomic per nonzero bin                     bins)
``modstep``          a loop filtered by a divisibility test (``if ((oh + pad - kh) % s) continue;``,  yes
                     a transposed convolution's taps) -> stepping ``|s|`` from the first
                     accepted iteration; the test dropped for a literal ``s``
``interior``         a loop nest's bounds tests (a convolution's or pooling's per-tap ``ih < 0 ||    yes
                     ih >= H``) decided once at the window's extremes: the nest without them
                     where they hold, as written elsewhere
``divmod``           ``k / d``, ``k % d`` of a strided loop's index (d fixed for the loop) ->     yes
                     a quotient and remainder carried across iterations (collapse's digits,
                     grid-stride loops over flat indices), under a non-negative check
``unroll``           ``#pragma unroll`` (fixed trip count) / ``unroll 4`` (thread-strided)     yes
``specialise``       the body versioned on the bench sizes' values of small loop-bounding       yes
                     integer scalars (``if (K == 3) {K as 3} else {as written}``): unrollable
``hoist``            a buffer's elements an inner loop of literal trip count reads at indices   yes
                     the enclosing loop never changes -> registers filled once before that
                     loop (a thread's own row, compared with many others)
``raster``           after fold, the 2-D grid as one x with the folded iterations of a row block  yes
                     in consecutive blocks (the order the original thread ran them: shared data
                     stays in L2)
``launch_bounds``    ``__launch_bounds__(N)`` for a fixed block of N threads                   yes
===================  ========================================================================  =====

``ldg``, ``ldg_na`` and ``stream`` are alternatives (group ``hint``), and so are ``vectorize``,
``grid_stride``, ``grid_reduce``, ``coarsen``, ``unflatten`` and the ``rowpar``, ``scan``, ``colpar``, ``blockrow``, ``smem_tile`` and ``mma_tile`` variants (group ``grid``: all redefine what a thread of
the grid does). ``fast_math`` is proposed alone, never in a chain (:data:`FOLLOW_UP_GROUPS`): each new best's
children hold it. Proposals, in this
order: every applicable pass alone, then greedy chains (each pass in :data:`PASSES` order applied
when its precondition holds on the text so far), one chain per combination of group alternatives
(the grid group's varying fastest), and the prefixes of the first chain (where a restructuring pass
applies: the first variant of each first, then the chains, then the other singles: :func:`plan_chains`); duplicates (same key) dropped; at most
:data:`MAX_CANDIDATES`. Each candidate records its passes in ``params`` (``{"pass:restrict": 1,
...}``, plus ``hint`` for a cache-hint pass, ``unroll`` for the unroll pass and ``vec: 16`` (bytes
per access) for ``vectorize`` and ``vector_loops``) and in ``description`` (``transform restrict+ldg+shuffle_reduce``).

The generator returns ``[]`` for a kernel whose signature differs from the spec; a kernel template keeps its
instantiation (``template_args``).
Passes that keep the launch also apply under ``launch.policy = "fixed"`` (the kernel stays a
drop-in for the same launch); ``grid_stride`` and ``vectorize`` need ``"free"``.
"""
from __future__ import annotations

import itertools
import logging
import re

from ptxfactory.harness.source import SignatureMismatch, check_signature, find_kernel, replace_kernel
from ptxfactory.protocol import PASSES_SILENT, Candidate, LaunchConfig

from ...base import GenContext
from . import syntax as sx
from .atomic_agg import AtomicAggPass
from .base import BLOCK_FUNCTIONS_NOTE, FUNCTIONS_NOTE, OPAQUE_NOTE, TEMPLATE_NOTE, Pass, Unit
from .blockrow import BlockRowPass
from .blockrow_cluster import BlockClusterPass
from .grid_reduce import GridReducePass
from .coarsen import CoarsenPass
from .coarsen_outer import FACTORS as OUTER_COARSEN, OuterCoarsenPass
from .collapse import CollapsePass
from .divmod import DivModPass
from .fold import FoldPass
from .colpar import ColumnParallelPass
from .expand import CONSTANTS_NOTE, expand_kernel, integer_constants
from .fast_math import FastMathPass
from .grid_stride import FACTS_NOTE, GridStridePass
from .hold_row import VARIANTS as HOLD_VARIANTS, HoldRowPass
from .hoist import HoistPass
from .launch_bounds import LaunchBoundsPass
from .ldg import LdgNoAllocatePass, LdgPass, StreamPass
from .restrict import RestrictPass
from .online_softmax import OnlineSoftmaxPass
from .fuse_moments import FuseMomentsPass
from .promote import PromotePass
from .raster import RasterPass
from .rowpar import RowParallelPass
from .rowpar_cluster import CLUSTER_SIZES, RowClusterPass
from .scan import ScanPass
from .shuffle_reduce import ShuffleReducePass
from .sink import sink_declarations
from .early_exit import else_for_early_exits
from .smem_hist import SmemHistPass
from .ascending import ascending_loops
from .perfect_nest import perfect_nests
from .walking import walked_pointers
from .while_for import counted_whiles
from .selects import if_selects
from .smem_tile import CONFIGS as SMEM_TILES, SmemTilePass
from .modstep import ModStepPass
from .interior import InteriorPass
from .mma_tile import ASYNC_CONFIGS as MMA_ASYNC_TILES, CONFIGS as MMA_TILES, TF32_CONFIGS as MMA_TF32_TILES, MmaTilePass
from .specialise import SpecialisePass
from .unflatten import UnflattenPass
from .unroll import STRIDED_UNROLL, UnrollPass
from .vector_loops import VectorLoopsPass
from .vectorize import VectorizePass
from .vectorize_x import VectorizeXPass

log = logging.getLogger(__name__)

__all__ = ["TransformGenerator", "PASSES", "Unit", "refusals", "unit_from_context"]

# Lanes per row for ``rowpar``: chosen at launch from the row length and row count (at most 32 elements a lane, "auto",
# or 128, "auto_e128"), then fixed counts: a warp, a block of 256, a sub-warp of 8, a block of 1024, then the rest (the
# lessons reorder them).
ROWPAR_LANES = ("auto", "auto_e128", 32, 256, 8, 1024, 16, 512, 4, 128)
# Lanes per row for ``blockrow`` (a kernel written one block per row): chosen at launch, a warp, a block of 128.
BLOCKROW_LANES = ("auto", 32, 128)
# Threads per column for ``colpar`` (a column reduction written one thread per column): chosen at launch, then fixed.
COLPAR_SPLITS = ("auto", 8, 32, 16, 4)
# Elements per thread for ``coarsen`` (one thread per element -> K, all K loads in flight before their use).
COARSEN = (4, 8)
# Lanes per row for ``scan`` (a running accumulation stored per element, one thread per row): chosen at launch, a warp, a block.
SCAN_VARIANTS = ("auto", "warp", "block256")

# Chain order: aliasing facts first, then the accesses, the arithmetic, the reductions, the loop
# structure (smem_tile before the hints, whose loads it stages; collapse right before rowpar, whose split it widens; vectorize after the hints, whose loads and stores it widens; vector_loops after rowpar, whose
# split loops it widens, and after hold_row, whose original loops (the long rows' path) it widens; grid_stride before unroll, so the new loop can be unrolled, divmod after every pass that writes a loop's step (rowpar, grid_stride), and before atomic_agg and smem_hist, which accumulate over it), specialise after every pass that reads the body's shape
# (its versions are copies of the body under a dispatch no other pass reads), modstep after it (the literal strides, the unit
# dilations of its versions), hoist after them (their literal trip counts), raster once the launch is chosen, and the register budget last.
PASSES: tuple[Pass, ...] = (
    RestrictPass(), PromotePass(), *(SmemTilePass(*t) for t in SMEM_TILES), *(MmaTilePass(*t) for t in MMA_TILES),
    *(MmaTilePass(*t, single_tf32=True) for t in MMA_TF32_TILES), *(MmaTilePass(rm, rn, stages=st) for rm, rn, st in MMA_ASYNC_TILES), LdgPass(), LdgNoAllocatePass(), StreamPass(), FastMathPass(), GridReducePass(), ShuffleReducePass(), OnlineSoftmaxPass(), FuseMomentsPass(),
    FoldPass(), CollapsePass(), *(RowParallelPass(lanes) for lanes in ROWPAR_LANES), *(RowClusterPass(c) for c in CLUSTER_SIZES), *(ScanPass(v) for v in SCAN_VARIANTS),
    *(ColumnParallelPass(s) for s in COLPAR_SPLITS), *(BlockRowPass(lanes) for lanes in BLOCKROW_LANES), *(BlockClusterPass(c) for c in CLUSTER_SIZES),
    *(HoldRowPass(h) for h in HOLD_VARIANTS), VectorizePass(), GridStridePass(), *(CoarsenPass(k) for k in COARSEN), UnflattenPass(), VectorizeXPass(), *(OuterCoarsenPass(k) for k in OUTER_COARSEN), *(OuterCoarsenPass(k, middle=True) for k in OUTER_COARSEN), AtomicAggPass(), SmemHistPass(), VectorLoopsPass(), DivModPass(), UnrollPass(),
    SpecialisePass(), ModStepPass(), InteriorPass(), HoistPass(), RasterPass(), LaunchBoundsPass(),
)
# Groups that a chain may also go without when one of them applies: ``collapse`` (group "nest") flattens a loop nest
# for rowpar, which pays a division per element; measured on RoPE (H200), the nest split at its inner loop alone was
# faster at two of three sizes and slower at the third, so both kinds of chain are proposed and timed. ``coarsen_outer``
# (group "outer") trades blocks for rows a thread: which wins depends on the sizes, so both kinds are timed too.
OPTIONAL_GROUPS = frozenset({"nest", "divmod", "outer", "vecx", "moments", "modstep", "interior"})
# Groups whose pass is proposed alone and never inside a chain: ``fast_math`` (group "math"). Each new best is
# expanded (strategy.optimise), so "best -> fast_math" follows every best, the way the other singles do. In a chain,
# an approximation that fails verification took the chain's exact restructuring down with it (an int8 quantisation
# whose scale moved by one ulp); proposing every chain with and without it (2026-12-03) doubled the first generation,
# and l2norm_rows (H200, 40 s budget) spent it on seven such pairs, each within 1-12% of its twin, and did not reach
# its best child chain.
FOLLOW_UP_GROUPS = frozenset({"math"})
# Optional groups whose chains go without them first, and vary slowest of the optional ones: ``divmod`` (group
# "divmod") is exact and saves a division per iteration, but measured on RoPE's collapsed nest (H200) it ran slower
# than the division it replaces (53/58/48% of copy against 58/62/52%), so its chains follow the ones without it.
# ``coarsen_outer`` has not been timed on a GPU yet (2026-12-05): its chains follow too, and it is tried at its turn
# in the chain (it applies to the 3-D launch unflatten writes, not to the flat original). ``modstep`` (2026-12-05) is
# untimed too: a transposed convolution's taps stepped by the stride lose the compiler's full unroll of a literal window.
UNPROVEN_GROUPS = frozenset({"divmod", "outer", "vecx", "moments", "modstep", "interior"})
MAX_CANDIDATES = 24  # singles (the lane and block variants are many) plus the first greedy chains


class TransformGenerator:
    """Semantics-preserving source passes on the parent kernel, alone and chained (at most MAX_CANDIDATES candidates)."""

    name = "transform"

    def propose(self, ctx: GenContext) -> list[Candidate]:
        try:
            check_signature(ctx.spec, ctx.kernel)
        except SignatureMismatch:
            return []
        unit = unit_from_context(ctx)
        if unit.fn is None:
            return []
        chains = covering_order(plan_chains(unit), MAX_CANDIDATES)
        out, keys = [], {ctx.original.key}
        for chain in chains:
            if len(out) >= MAX_CANDIDATES:
                break
            result, ran = run_chain(unit, chain, ran=True)
            cand = self.candidate(ctx, result, ran)
            if cand is not None and cand.key not in keys:
                keys.add(cand.key)
                out.append(cand)
        return out

    def refusals(self, ctx: GenContext) -> list[tuple[str, str]]:
        """Why each restructuring pass leaves the parent alone (:func:`refusals`); [] when the signature differs."""
        try:
            check_signature(ctx.spec, ctx.kernel)
        except SignatureMismatch:
            return []
        unit = unit_from_context(ctx)
        if unit.fn is None:
            return []
        # the passes count lines in the kernel's own text: the file's lines are offset by the lines before the kernel
        offset = ctx.source.encode()[: ctx.kernel.start_byte].count(b"\n")
        return [(names, _file_lines(reason, offset)) for names, reason in refusals(unit)]

    def candidate(self, ctx: GenContext, unit: Unit, chain: list[Pass]) -> Candidate | None:
        """The candidate for a transformed unit (None when the passes changed nothing)."""
        if unit.text == ctx.kernel.text and unit.launch == ctx.original.launch:
            return None
        names = [p.name for p in chain]
        params: dict = {f"pass:{n}": 1 for n in names}
        hint = next((p.name for p in chain if p.group == "hint"), None)
        if hint is not None:
            params["hint"] = "stream" if hint == "stream" else "ldg"
        if "unroll" in names:
            params["unroll"] = STRIDED_UNROLL
        if "vectorize" in names or "vector_loops" in names:
            params["vec"] = unit.notes.get("vec", 16)  # bytes per load and store
        if "fast_math" in names:
            params["math"] = "fast"  # the knob shared by every generator: approximate intrinsics
        desc = "transform " + "+".join(names)
        if unit.notes.get("fast_math_ops"):
            params["fast_math_ops"] = unit.notes["fast_math_ops"]
            desc += f" (fast_math: {unit.notes['fast_math_ops']})"
        if unit.notes.get("lanes"):
            params["lanes"] = unit.notes["lanes"]  # threads per row ("auto", "auto_e128": chosen at launch)
            if isinstance(unit.notes["lanes"], int):
                params["block"] = unit.launch.block[0]
        if unit.notes.get("held"):
            params["held"] = unit.notes["held"]  # elements per lane hold_row keeps in registers
        if unit.notes.get("grid_cap"):
            params["grid_cap"] = unit.notes["grid_cap"]
        block = _definition_block(ctx, unit)
        kernel_text, source = _splice(ctx, block)
        return Candidate(
            kernel_name=ctx.original.kernel_name, source=source, kernel_text=kernel_text, launch=unit.launch,
            options=list(ctx.original.options), generator=self.name, description=desc, params=params,
            parent=ctx.original.key, template_args=list(ctx.original.template_args),
        )


FAILED = "the pass failed on this kernel (an error of the pass, logged; it is left out of this job)"


def refusals(unit: Unit) -> list[tuple[str, str]]:
    """``(passes, reason)`` for each pass that says ``why_not`` (the restructuring ones, ``vectorize`` and the hints) and
    does not apply to ``unit``; variants refused for the same reason share one entry (``"rowpar_auto, rowpar_lanes32:
    ..."``), in PASSES order; then one entry (:data:`~ptxfactory.protocol.PASSES_SILENT`) naming the other passes that
    do not apply (the local rewrites)."""
    by_reason: dict[str, list[str]] = {}
    silent: list[str] = []
    for p in PASSES:
        why = getattr(p, "why_not", None)
        if why is not None:
            try:
                reason = why(_seen_by(p, unit))
            except Exception:  # noqa: BLE001  (a pass's bug costs its entry, not the job: _applies leaves it out too)
                log.warning("transform pass %s failed on kernel %s; left out", p.name, unit.spec.name, exc_info=True)
                reason = FAILED
            if reason:
                by_reason.setdefault(reason, []).append(p.name)
            elif reason is not None:
                silent.append(p.name)  # ("": no reason given; still listed, not left out)
        elif not _applies(p, unit):
            silent.append(p.name)
    out = [(", ".join(names), reason) for reason, names in by_reason.items()]
    return out + ([(", ".join(dict.fromkeys(silent)), PASSES_SILENT)] if silent else [])


def _file_lines(reason: str, offset: int) -> str:
    """``reason`` with each ``line N`` (``lines N/M``, ``line N: ...``) of the kernel's text moved ``offset`` lines down."""
    shift = lambda m: m.group(1) + "/".join(str(int(n) + offset) for n in m.group(2).split("/"))  # noqa: E731
    return re.sub(r"\b(lines? )(\d+(?:/\d+)*)", shift, reason)


def unit_from_context(ctx: GenContext) -> Unit:
    """The parent's kernel definition (the file's macros and one-line helpers expanded), launch and linkage as a :class:`Unit`."""
    notes = {FACTS_NOTE: ctx.facts} if getattr(ctx, "facts", None) is not None else {}  # the GPU's facts, for grid caps
    # the file's function-like macros and one-line __device__ helpers seen through (expand.py); a macro that cannot
    # be expanded leaves the text as it is and the unit without a body for the passes (base.OPAQUE_NOTE)
    text, opaque = expand_kernel(ctx.source, ctx.kernel.text, ctx.kernel.start_byte)
    if opaque:
        notes[OPAQUE_NOTE] = "; ".join(opaque)
    root = sx.parse(ctx.source.encode()).root_node
    constants = integer_constants(root, ctx.kernel.start_byte, ctx.kernel.start_byte + len(ctx.kernel.text.encode()))
    if constants:
        notes[CONSTANTS_NOTE] = constants  # #define K 7: loop trip counts the passes can read
    notes[FUNCTIONS_NOTE] = sx.file_functions(root)  # a min() of the file's own is not CUDA's
    notes[BLOCK_FUNCTIONS_NOTE] = sx.block_level_functions(root)  # a __device__ blockReduceSum: its caller's threads together
    template = ctx.spec.tune.template
    fixed = {k: str(a) for (k, values), a in zip(template.items(), ctx.original.template_args)
             if len(values) == 1 and str(values[0]) == str(a)} if len(ctx.original.template_args) == len(template) else {}
    if fixed:
        notes[TEMPLATE_NOTE] = fixed  # template <typename T> with T = float only: a const T* reads floats
    unit = Unit(text=text, launch=ctx.original.launch, spec=ctx.spec, c_linkage=_c_linkage(ctx.source, ctx.kernel.start_byte),
                notes=notes)
    # pure declarations written before the thread index (float best = -1e30f;) moved after its guard (sink.py), so
    # that the openings the passes read start at the index
    sunk = sink_declarations(unit.data, unit.body)
    unit = unit if sunk == unit.data else unit.with_text(sunk)
    # an early exit (if (edge) { ...; return; } rest) written as if (edge) {...} else {rest} (early_exit.py), so that
    # the passes that run an element's code several times in one thread take it
    flat = else_for_early_exits(unit.data, unit.body)
    unit = unit if flat == unit.data else unit.with_text(flat)
    # a descending counted loop (for (int j = N - 1; j >= 0; --j)) written as the same iterations over an ascending
    # counter (ascending.py), so that the loop passes (scan: a reverse cumulative sum) read it
    up = ascending_loops(unit.data, unit.body)
    unit = unit if up == unit.data else unit.with_text(up)
    # then, each over the text the one before wrote: a loop's guards between it and its only inner loop (a
    # convolution's if (ih < 0 || ih >= H) continue; before the kw loop) moved into the inner loop (perfect_nest.py),
    # so that the GEMM-class passes read the nest as one k; a pointer stepped through a loop (acc += *p; p += N;) read
    # at the loop's index (walking.py), so that its loads have a known offset (colpar, rowpar); a counted while loop
    # (int dh = 0; while (dh < 2) { ...; dh++; }) written as its for loop (while_for.py), so that the loop passes read
    # it (coarsen: a short literal loop is the element's own); an if/else whose branches assign one place written as
    # one assignment of a conditional expression (selects.py), so that the passes taking straight-line element code
    # read one store (vectorize: y[i] = v > 0 ? v : alpha * v)
    for canonical in (perfect_nests, walked_pointers, counted_whiles, if_selects):
        new = canonical(unit.data, lambda d: unit.with_text(d).body)
        unit = unit if new == unit.data else unit.with_text(new)
    return unit


def plan_chains(unit: Unit) -> list[list[Pass]]:
    """Pass lists to try, in proposal order: singles, one greedy chain per combination of group alternatives, then the first chain's prefixes;
    where a restructuring pass applies, the first variant of each that reparallelises (group ``grid``: rowpar_auto,
    blockrow_auto, ...) first, then the greedy chains, then the other restructuring singles, the other singles and
    the prefixes.

    Passes of one group are alternatives: a chain holds at most the one chosen for it. Combinations
    run over the groups in :data:`PASSES` order (``hint`` first), each group's applicable passes in
    that order.
    """
    singles = [[p] for p in PASSES if _applies(p, unit)]
    groups = list(dict.fromkeys(p.group for p in PASSES if p.group is not None))
    # the grid group's alternatives (rowpar's lanes, colpar's splits, ...) vary fastest: the first chains cover every
    # way of parallelising the kernel before they cover another hint for each
    # an optional group's chains are built with and without it, its "without" varying just slower than the grid
    groups = ([g for g in groups if g != "grid" and g not in OPTIONAL_GROUPS] + [g for g in groups if g in UNPROVEN_GROUPS]
              + [g for g in groups if g in OPTIONAL_GROUPS - UNPROVEN_GROUPS] + [g for g in groups if g == "grid"])
    # a group's alternatives: those that apply to the unit, or to it after the passes of no group (promote's register
    # turns a y[r] += ... loop into a sum that rowpar or smem_tile then takes)
    def alternatives(g: str) -> list[Pass | None]:
        if g in FOLLOW_UP_GROUPS:
            return [None]
        first = next(i for i, p in enumerate(PASSES) if p.group == g)
        prepared = run_chain(unit, [p for p in PASSES[:first] if p.group is None])
        # ... or after an optional group's pass before it (collapse's one loop over a channel's images and pixels is
        # long enough for a block or a cluster a row, where the nest's outer loop alone was not)
        found = [p for p in PASSES if p.group == g and (_applies(p, unit) or _applies(p, prepared))]
        rest = [(i, p) for i, p in enumerate(PASSES) if p.group == g and p not in found]
        if rest:  # (the optional passes' readings only where some alternative needs them)
            readings = [(k, run_chain(prepared, [q])) for k, q in enumerate(PASSES)
                        if q.group in OPTIONAL_GROUPS and q.group != g and _applies(q, prepared)]
            more = {id(p) for i, p in rest if any(k < i and _applies(p, r) for k, r in readings)}
            found = [p for p in PASSES if p in found or id(p) in more]
        if g in UNPROVEN_GROUPS:  # (each tried at its turn in the chain: divmod applies to the loops rowpar or grid_stride write)
            # ... where it may apply at all: a pass's cheap ``maybe`` (modstep: a % test in a loop) keeps the
            # combinations of the groups from multiplying for every kernel (each doubles the greedy chains' work)
            return [None] + [p for p in PASSES if p.group == g and getattr(p, "maybe", lambda u: True)(unit)]
        return found + [None] if g in OPTIONAL_GROUPS else found or [None]

    options = [alternatives(g) for g in groups]
    greedy, memo = [], {}
    for choice in itertools.product(*options):
        chain = _greedy_chain(unit, {g: p for g, p in zip(groups, choice)}, memo)
        if len(chain) > 1:
            greedy.append(chain)
    prefixes = [greedy[0][:k] for k in range(2, len(greedy[0]))] if greedy else []
    # where a pass that changes how the work is parallelised applies (a restructuring pass: one that can say why
    # not), it and the chains holding it go first: on a naive kernel it is the lever that moves the time by
    # factors, the cosmetic passes alone by percents (and the lessons reorder the candidates of later jobs)
    restructure = [c for c in singles if _restructures(c)]
    if restructure or any(_restructures(c) for c in greedy):  # (a chain's: promote lets rowpar take the kernel)
        kinds: dict[type, list[Pass]] = {}
        for c in restructure:  # the first variant of each pass that reparallelises (its "auto" one), then the chains
            if c[0].group == "grid":  # (online_softmax, hold_row, atomic_agg alone: after the chains that hold them)
                kinds.setdefault(type(c[0]), c)
        first = list(kinds.values())
        order = first + greedy + [c for c in restructure if c not in first] + [c for c in singles if not _restructures(c)] + prefixes
    else:
        order = singles + greedy + prefixes
    out, seen = [], set()
    for chain in order:
        key = tuple(p.name for p in chain)
        if key not in seen:
            seen.add(key)
            out.append(chain)
    return out


def covering_order(chains: list[list[Pass]], limit: int) -> list[list[Pass]]:
    """``chains`` (the planned order) with every kind of pass that some chain holds in one of the first ``limit``:
    the first chain holding each kind (a pass's ``kind`` where it has one, else its class: rowpar's lanes chosen at
    launch, a group within a warp and a block are three kinds; its lane counts within one are one) keeps its place among
    the first ``limit``, and the other chains fill the rest of them in the planned order; the remaining chains
    follow, in order. Without it a pass whose chains all come late (``specialise`` behind a GEMM's 35 tile and hint
    chains, ``fast_math`` behind 50 lane chains) was never proposed. Where the kinds outnumber ``limit``, the order
    is kept as planned."""
    seen: set[type] = set()
    covering = []
    for i, chain in enumerate(chains):
        kinds = {getattr(p, "kind", type(p)) for p in chain}
        if not kinds <= seen:
            seen |= kinds
            covering.append(i)
    if len(covering) > limit:
        return chains
    must, room, head, tail = set(covering), limit - len(covering), [], []
    for i, chain in enumerate(chains):
        if i in must:
            head.append(chain)
        elif room > 0:
            head.append(chain)
            room -= 1
        else:
            tail.append(chain)
    return head + tail


def _step(memo: dict, p: Pass, u: Unit) -> Unit | None:
    """``p.apply(u)`` when ``p.applies(u)``, else None; remembered in ``memo`` by the pass and the unit's text, launch and
    notes (the greedy chains of one kernel share their prefixes: each is worked out once)."""
    key = (p.name, u.text, repr(u.launch), u.helpers, repr(sorted(u.notes.items(), key=lambda kv: kv[0])))
    if key not in memo:
        memo[key] = _apply(p, u)
    return memo[key]


def _apply(p: Pass, u: Unit) -> Unit | None:
    """``p.apply(u)`` where ``p.applies(u)``, else None. A pass that raises (a bug of its own: its precondition held and
    its rewrite failed) is logged and read as not applying, so the other passes' candidates are still proposed (an
    overlapping edit in one pass lost every transform candidate of a kernel, 2026-12-05)."""
    u = _seen_by(p, u)
    try:
        return p.apply(u) if p.applies(u) else None
    except Exception:  # noqa: BLE001 - one pass's failure must not take the generator down
        log.warning("transform pass %s failed on kernel %s; left out", p.name, u.spec.name, exc_info=True)
        return None


def _applies(p: Pass, u: Unit) -> bool:
    """``p.applies(u)``; False (logged) where the precondition itself raises (:func:`_apply`)."""
    try:
        return p.applies(_seen_by(p, u))
    except Exception:  # noqa: BLE001
        log.warning("transform pass %s failed on kernel %s; left out", p.name, u.spec.name, exc_info=True)
        return False


def _seen_by(p: Pass, u: Unit) -> Unit:
    """The unit ``p`` reads: with its locals renamed apart (:attr:`Unit.renamed_apart`) for a pass that reads locals by
    name (``unique_names = True``: it would refuse a name declared twice), else ``u`` as it is."""
    return u.renamed_apart if getattr(p, "unique_names", False) else u


def _greedy_chain(unit: Unit, chosen: dict[str, Pass | None], memo: dict | None = None) -> list[Pass]:
    """Every pass in PASSES order whose precondition holds at its turn, of each group only the ``chosen`` one.

    When the chosen pass of the ``grid`` group (the launch-changing restructuring: rowpar, colpar, blockrow, ...)
    applied to ``unit`` but no longer does at its turn, an earlier pass of no group took its pattern away
    (shuffle_reduce rewrites the shared-memory tree that blockrow replaces): the chain is built again without
    the latest such pass, until the chosen one applies or none is left to drop."""
    skip: set[str] = set()
    memo = {} if memo is None else memo
    while True:
        chain, u = [], unit
        for p in PASSES:
            if (p.group is not None and p is not chosen[p.group]) or p.name in skip:
                continue
            out = _step(memo, p, u)
            if out is not None:
                u = out
                chain.append(p)
        grid = chosen.get("grid")
        if grid is None or grid in chain:
            return chain
        if not _applies(grid, unit) and not _applies(grid, 
                run_chain(unit, [q for q in PASSES[:PASSES.index(grid)] if q.group is None])):
            return []  # (it applies only after another group's pass, collapse's, which this combination left out)
        earlier = [p for p in chain if p.group is None and PASSES.index(p) < PASSES.index(grid)]
        if not earlier:
            return chain
        skip.add(earlier[-1].name)


def _restructures(chain: list[Pass]) -> bool:
    """Whether ``chain`` holds a restructuring pass (one with a ``why_not`` that does not say ``restructures = False``:
    rowpar, colpar, blockrow, hold_row, smem_tile, atomic_agg, smem_hist; not ``vectorize`` and the hints, whose
    reasons are the report's only), not counting an unproven group's (``coarsen_outer``: not yet timed, it does not
    move a kernel's chains ahead of its singles)."""
    return any(getattr(p, "why_not", None) is not None and getattr(p, "restructures", True) and p.group not in UNPROVEN_GROUPS
               for p in chain)


def run_chain(unit: Unit, chain: list[Pass], ran: bool = False):
    """``unit`` through each pass of ``chain`` whose precondition holds at its turn; with ``ran``, ``(unit, the passes
    that changed it)`` (a pass that raised is left out: :func:`_apply`)."""
    done = []
    for p in chain:
        out = _apply(p, unit)
        if out is not None:
            unit = _fit_launch_bounds(unit, out)
            done.append(p)
    return (unit, done) if ran else unit


def _fit_launch_bounds(before: Unit, unit: Unit) -> Unit:
    """``unit`` (a pass's output from ``before``) without its ``__launch_bounds__(N, ...)`` when the pass changed the
    block and the new one may exceed N threads (rowpar's 256 on a kernel bounded at 128 would not launch); otherwise
    as it is."""
    if list(unit.launch.block) == list(before.launch.block):
        return unit
    fn = unit.fn
    node = next((c for c in fn.children if c.type == "launch_bounds"), None) if fn is not None else None
    if node is None:
        return unit
    m = re.match(r"__launch_bounds__\s*\(\s*(\d+)\s*[,)]", sx.text(node))
    threads = unit.block_threads()
    if m is not None and threads is not None and threads <= int(m.group(1)):
        return unit
    return unit.with_text(sx.apply_edits(unit.data, [(node.start_byte, node.end_byte, b"")]))


def describe_launch(launch: LaunchConfig) -> str:
    """``// Launch: grid (G,), block (B,), no dynamic shared memory.`` (the comment every candidate carries)."""
    def dims(d: list) -> str:  # (G,) for one dimension, as a tuple is written; (X, Y) for two or three
        return "(" + ", ".join(map(str, d)) + ("," if len(d) == 1 else "") + ")"

    smem = "no dynamic shared memory" if str(launch.shared_mem).strip() in ("0", "") else f"{launch.shared_mem} bytes of dynamic shared memory"
    return f"// Launch: grid {dims(launch.grid)}, block {dims(launch.block)}, {smem}."


def _definition_block(ctx: GenContext, unit: Unit) -> str:
    """New helpers (C++ linkage), the launch comment and the kernel definition: what replaces the old definition."""
    helpers = [body for name, body in unit.helpers if not re.search(rf"\b{re.escape(name)}\s*\(", ctx.source)]
    head = ""
    if helpers:
        head = 'extern "C++" {\n' + "\n".join(helpers) + '\n}  // extern "C++"\n\n'
    return head + describe_launch(unit.launch) + "\n" + unit.text


def _splice(ctx: GenContext, block: str) -> tuple[str, str]:
    """``(kernel_text, source)``: ``block`` in place of the parent's definition, in its kernel text and its source.

    For the user's kernel, ``kernel_text`` is ``block`` and the source is ``replace_kernel(ctx.source,
    ctx.kernel, block)``. For a candidate whose kernel text also holds helpers (a family's), the
    definition inside that text is replaced and the old ``// Launch:`` comment above it dropped.
    """
    parent = ctx.original
    fallback = (block, replace_kernel(ctx.source, ctx.kernel, block))
    if parent.kernel_text == ctx.kernel.text:
        return fallback
    try:
        inner = find_kernel(parent.kernel_text, ctx.kernel.name)
    except KeyError:
        return fallback
    data = parent.kernel_text.encode()
    prefix, suffix = data[: inner.start_byte].decode(), data[inner.end_byte :].decode()
    lines = prefix.rstrip(" \t").split("\n")
    if len(lines) >= 2 and lines[-1] == "" and lines[-2].lstrip().startswith("// Launch:"):
        prefix = "\n".join(lines[:-2]) + ("\n" if len(lines) > 2 else "")
    kernel_text = prefix + block + suffix
    pos = ctx.source.find(parent.kernel_text)
    if pos < 0:
        return fallback
    return kernel_text, ctx.source[:pos] + kernel_text + ctx.source[pos + len(parent.kernel_text):]


def _c_linkage(source: str, start_byte: int) -> bool:
    """The kernel starting at ``start_byte`` has C linkage (``extern "C"`` on it or on an enclosing block)."""
    tree = sx.parse(source.encode())
    node = tree.root_node.descendant_for_byte_range(start_byte, start_byte)
    while node is not None:
        if node.type == "linkage_specification" and sx.text(node.child_by_field_name("value")) == '"C"':
            return True
        node = node.parent
    return False
