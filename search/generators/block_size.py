"""Which block sizes a kernel's code allows, and the grid that covers the same work with each.

Read from the kernel's syntax tree (tree-sitter-cuda) and from every function of the source that it
calls, directly or not; nothing is run. :func:`block_choices` answers, for a candidate with a 1-D
literal block ``B0`` and each proposed block ``B1``, either a launch (the grid recomputed) or the
reason the change is refused, one of:

* :data:`NO_BLOCKDIM` -- the kernel never reads ``blockDim``: its indexing assumes the launched block
  (``blockIdx.x * 256 + threadIdx.x``), so no other block is proposed.
* :data:`BLOCKIDX_TIMES_BLOCK` -- ``blockIdx.x`` is multiplied by the literal ``B0`` (``<< log2 B0``).
* :data:`CONSTANT_STRIDE` -- a loop that halves a stride from a constant (``for (s = 128; s > 0; s >>= 1)``)
  works on ``__shared__`` data: a tree reduction written for one block size.
* :data:`SHARED_BOUND` -- a ``__shared__`` array of constant size ``K`` is indexed by ``threadIdx.x``
  (or by a name computed from it: ``tid + s`` counts as ``tid``, ``tid / 32`` and ``tid >> 5`` allow
  ``32 K`` threads, ``tid % 32`` and comparisons bound nothing): at most ``K`` (x the divisor) threads.
  An access under a guard ``threadIdx.x < C`` (``if`` or ``?:``, C within the array) bounds nothing.
  An array passed whole to a function counts as indexed by ``threadIdx.x``. Dynamic ``extern
  __shared__`` arrays are sized by the launch's literal byte count and their element type.
* :data:`UNKNOWN_SIZE`, :data:`UNKNOWN_INDEX` -- a thread-indexed shared array whose size is not a
  known constant (a ``#define``, ``-D`` option, ``const``/``constexpr`` integer or template argument
  are known), or an index whose growth with the thread index cannot be bounded.
* :data:`LAUNCH_BOUNDS` -- ``__launch_bounds__(N)``: at most N threads.
* :data:`GRID_FIXED`, :data:`GRID_UNSCALED`, :data:`GRID_BAD` -- the grid cannot be recomputed (below).

The grid: when the kernel's index grows with ``blockIdx * blockDim`` (a product of the two builtins
or of names computed from them: "scaled indexing"), each block covers ``B0`` threads' work, so the
grid's divisions by ``B0`` (``cdiv(X, c)``, ``X // c``, ``(X + c - 1) // c`` with ``c`` a multiple of
``B0``, e.g. ``cdiv(N, 4 * B0)`` of a kernel doing 4 elements per thread) become divisions by
``c * B1 / B0``. A ``min(G, cap)`` whose ``cap`` is the parent's ``grid_cap`` knob (a grid-stride
loop's one-wave cap) scales to ``cap * B0 / B1`` blocks, the same threads. A kernel without scaled
indexing (one block per row, threads striding over ``blockDim``) keeps its grid, and is refused when
its grid divides by the block. A kernel that reads ``gridDim`` (a grid-stride loop) covers its work
with any grid. Only the first grid dimension is rewritten; the literal ``B0`` elsewhere refuses.
Every new grid is evaluated at the spec's check and bench sizes (a positive integer below 2^31).
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from fractions import Fraction

from ptxfactory.harness.static_checks import MAX_GRID_DIMS
from ptxfactory.protocol import Candidate, KernelSpec, LaunchConfig
from ptxfactory.protocol.expr import ExprError, evaluate

from .transform import syntax as sx
from .transform.grid_stride import most_blocks
from .transform.syntax import Node

BLOCK_SIZES = (128, 256, 512, 1024)  # what "tune" proposes: powers of two, whole warps, the hardware's range
# what "tune" proposes for a 2-D block (x, y): rows of whole warps (a naive 16 x 16 block reads half-warp rows), 128 to
# 512 threads, and a row of 256 (the lessons order them)
BLOCK_SHAPES = ((32, 8), (64, 4), (32, 4), (32, 16), (64, 8), (128, 2), (128, 4), (256, 1))
MAX_THREADS = 1024  # threads per block on every CUDA GPU since sm_20

NO_BLOCKDIM = "the kernel never reads blockDim: its indexing assumes the launched block"
BLOCKIDX_TIMES_BLOCK = "blockIdx.x is multiplied by {b0}, the launched block: its indexing assumes that block"
CONSTANT_STRIDE = "a loop over __shared__ data halves a stride from the constant {c}: a reduction written for one block"
SHARED_BOUND = "__shared__ {name}[{size}] indexed by threadIdx.x: at most {bound} threads"
UNKNOWN_SIZE = "__shared__ {name} is indexed by threadIdx.x and its size is not a known constant"
UNKNOWN_INDEX = "__shared__ {name} is indexed by {index}, which tune cannot bound in threads"
LAUNCH_BOUNDS = "__launch_bounds__({n}): at most {n} threads"
LAUNCH_BOUNDS_UNKNOWN = "__launch_bounds__({arg}) is not a known constant"
GRID_FIXED = "the kernel's index grows with blockIdx * blockDim but grid {grid} does not divide by the block: the same work cannot be covered"
GRID_UNSCALED = "grid {grid} divides by the block but the kernel's index does not grow with blockDim"
GRID_BAD = "grid {grid} uses the block's size outside cdiv(X, B) / X // B: tune cannot recompute it"
GRID_SIZES = "grid {grid} with block {b1} is not a positive integer below 2^31 at every spec size"

ELEMENT_BYTES = {
    "char": 1, "signed char": 1, "unsigned char": 1, "int8_t": 1, "uint8_t": 1, "bool": 1,
    "short": 2, "unsigned short": 2, "int16_t": 2, "uint16_t": 2, "__half": 2, "half": 2, "__nv_bfloat16": 2,
    "nv_bfloat16": 2, "float": 4, "int": 4, "unsigned": 4, "unsigned int": 4, "int32_t": 4, "uint32_t": 4,
    "__half2": 4, "half2": 4, "__nv_bfloat162": 4, "double": 8, "long long": 8, "unsigned long long": 8,
    "int64_t": 8, "uint64_t": 8, "size_t": 8, "float2": 8, "int2": 8, "uint2": 8, "float4": 16, "int4": 16,
    "uint4": 16, "double2": 16,
}
_UNKNOWN = Fraction(0)  # a thread-dependent value whose growth with threadIdx.x is not known


@dataclass(frozen=True)
class BlockFacts:
    """What a kernel's code says about its block size.

    ``fixed``: why no other block works (None: the block may change); ``max_threads`` and
    ``limit``: the largest block the code allows and the rule that set it (None: the hardware's 1024);
    ``scaled``: the index grows with ``blockIdx * blockDim``; ``grid_stride``: the kernel reads ``gridDim``.
    """

    fixed: str | None
    max_threads: int = MAX_THREADS
    limit: str | None = None
    scaled: bool = False
    grid_stride: bool = False


@dataclass(frozen=True)
class BlockChoices:
    """``launches``: block size -> the launch that covers the same work; ``refused``: block size -> why not.
    ``skipped``: why no block is proposed at all (fixed launch policy, a family's block knob, ...), or None."""

    launches: dict[int, LaunchConfig] = field(default_factory=dict)
    refused: dict[int, str] = field(default_factory=dict)
    skipped: str | None = None


def block_choices(parent: Candidate, spec: KernelSpec, sizes=BLOCK_SIZES, sm_count: int | None = None) -> BlockChoices:
    """For each block size in ``sizes`` other than the parent's: a launch, or the reason it is refused.

    Proposed only for ``launch.policy = "free"``, a parent without a ``block`` knob (a family's
    kernel is written for its block) and a block of one integer literal. With the GPU's ``sm_count``, a block larger
    than the parent's is refused where its grid has fewer blocks than the GPU has SMs at every bench size (a kernel of
    few threads: the larger block would leave SMs idle)."""
    block = parent.launch.block
    b0 = _int(block[0]) if len(block) == 1 else None
    if spec.launch.policy != "free":
        return BlockChoices(skipped="the spec's launch policy is fixed")
    if "block" in parent.params:
        return BlockChoices(skipped="the parent's block is a knob of the generator that wrote its kernel")
    if b0 is None:
        return BlockChoices(skipped=f"the block {block} is not a 1-D block of an integer literal")
    facts = block_facts(parent, b0)
    out = BlockChoices()
    for b1 in sizes:
        if b1 == b0:
            continue
        if facts.fixed is not None:
            out.refused[b1] = facts.fixed
        elif b1 > facts.max_threads:
            out.refused[b1] = facts.limit or f"at most {facts.max_threads} threads"
        else:
            grid = rescale_grid(parent, spec, facts, b0, b1)
            idle = _idle_sms(grid, spec, sm_count) if b1 > b0 and not isinstance(grid, str) else None
            if isinstance(grid, str):
                out.refused[b1] = grid
            elif idle is not None:
                out.refused[b1] = idle
            else:
                out.launches[b1] = LaunchConfig(grid=grid, block=[b1], shared_mem=parent.launch.shared_mem)
    return out


def _idle_sms(grid: list, spec: KernelSpec, sm_count: int | None) -> str | None:
    """Why ``grid`` leaves SMs idle: fewer blocks than ``sm_count`` at every bench size; None where it fills them at
    some size, or where that cannot be told (no SM count, no bench size, a grid the sizes do not define)."""
    most = most_blocks(grid, spec.bench.sizes) if sm_count else None
    if most is None or most >= sm_count:
        return None
    return f"at most {most} blocks at the bench sizes, fewer than the GPU's {sm_count} SMs: a larger block leaves SMs idle"


def block_shapes(parent: Candidate, spec: KernelSpec, shapes=BLOCK_SHAPES) -> BlockChoices:
    """For a 2-D block of integer literals ``(bx, by)`` (or a 3-D one, its depth ``bz`` kept): each shape of ``shapes``
    other than the parent's, keyed ``"XxY"`` (``"XxYxZ"``), with the grid recomputed per dimension (``cdiv(W, 16)`` ->
    ``cdiv(W, 32)`` for x, and for y), or why not.

    Only where the block's threads are independent and each dimension's index is scaled: no ``__shared__``,
    barrier or warp collective (a tile or a reduction is written for its block), no ``gridDim``, ``blockIdx.x``
    times ``blockDim.x`` and ``blockIdx.y`` times ``blockDim.y`` (directly or through names computed from them), no
    literal standing for the block (``blockIdx.y * 16``), ``threadIdx``/``blockIdx`` x and y read nowhere but in
    ``blockIdx.f * blockDim.f + threadIdx.f`` (a ``threadIdx.x == 0`` doing a block's work would change with the
    shape), each grid dimension divided by its block dimension
    (:func:`rescale_grid`'s rules) and within the hardware's limits at every spec size; ``__launch_bounds__(N)``
    caps the threads. Same conditions as :func:`block_choices` for the launch policy and a ``block`` knob."""
    block = parent.launch.block
    dims = [_int(b) for b in block]
    if spec.launch.policy != "free":
        return BlockChoices(skipped="the spec's launch policy is fixed")
    if "block" in parent.params:
        return BlockChoices(skipped="the parent's block is a knob of the generator that wrote its kernel")
    if len(dims) not in (2, 3) or None in dims or len(parent.launch.grid) < 2:
        return BlockChoices(skipped=f"the block {block} is not a 2-D or 3-D block of integer literals")
    bx, by = dims[0], dims[1]
    bz = dims[2] if len(dims) == 3 else 1  # (a 3-D block keeps its depth: its z index and grid stay as written)
    why, limit = _independent_threads(parent, bx, by)
    out = BlockChoices()
    for sx_, sy in shapes:
        key = f"{sx_}x{sy}" + (f"x{bz}" if bz != 1 else "")
        if (sx_, sy) == (bx, by):
            continue
        if why is None and sx_ * sy * bz > min(limit, MAX_THREADS):
            out.refused[key] = f"{sx_ * sy * bz} threads, more than a block's {MAX_THREADS}" \
                if sx_ * sy * bz > MAX_THREADS else LAUNCH_BOUNDS.format(n=limit)
            continue
        grid = why or _rescale_2d(parent, spec, (bx, by), (sx_, sy))
        if isinstance(grid, str):
            out.refused[key] = grid
        else:
            out.launches[key] = LaunchConfig(grid=grid, block=[sx_, sy] + ([bz] if len(dims) == 3 else []),
                                              shared_mem=parent.launch.shared_mem)
    return out


def _independent_threads(parent: Candidate, bx: int, by: int) -> tuple[str | None, int]:
    """Why ``parent``'s threads are not independent of their block's shape (:func:`block_shapes`), or None; and the
    threads its ``__launch_bounds__`` allows (:func:`_launch_limit`)."""
    root = sx.parse(parent.source.encode()).root_node
    kernel = _kernel_node(root, parent.kernel_name)
    if kernel is None:
        return f"kernel {parent.kernel_name} not found in the source", 0
    consts = _constants(root, parent, kernel)
    limit = _launch_limit(kernel, consts)
    if isinstance(limit, str):
        return limit, 0
    return _dependence(root, kernel, parent, consts, bx, by), limit


def _dependence(root: Node, kernel: Node, parent: Candidate, consts: dict, bx: int, by: int) -> str | None:
    """What in ``kernel`` (and the functions it reaches) ties a thread's work to its block's shape, or None."""
    fns = _reachable(root, kernel)
    nodes = [n for fn in fns for n in sx.walk(fn)]
    if _shared_arrays(root, fns, consts, parent.launch.shared_mem) or str(parent.launch.shared_mem).strip() not in ("0", ""):
        return "the kernel uses __shared__ memory: its tiles are written for its block"
    calls = {sx.call_name(n) or "" for n in nodes if n.type == "call_expression"}
    if calls & set(sx.COLLECTIVES) or any(_WARP_LEVEL.search(c) for c in calls):
        return "the kernel synchronises or exchanges values within its block or warps"
    if any(n.type in ("gnu_asm_expression", "asm_statement") or (n.type == "identifier" and sx.text(n) in ("asm", "__asm__"))
           for n in nodes):
        return "the kernel holds inline assembly (a lane id or a shuffle would change with the shape)"
    if "cooperative_groups" in parent.source:
        return "the kernel uses cooperative groups (tiles of the block change with its shape)"
    if any(sx.is_builtin(n, "gridDim", f) for n in nodes if n.type == "field_expression" for f in "xyz"):
        return "the kernel reads gridDim"
    for f, b in (("x", bx), ("y", by)):
        if any(n.type == "binary_expression" and _blockidx_times(n, consts, f) == b for n in nodes):
            return BLOCKIDX_TIMES_BLOCK.format(b0=b).replace("blockIdx.x", f"blockIdx.{f}")
    for f in "xy":
        bi, bd = _derived(fns, "blockIdx", f), _derived(fns, "blockDim", f)
        if not any(_mixes(n, bi, bd, f) for n in nodes):
            return f"no index grows with blockIdx.{f} * blockDim.{f}"
    builtins = ("threadIdx", "blockIdx", "blockDim", "gridDim")
    for n in sx.walk(root):  # (a macro's use is an identifier: what it reads is in its definition)
        if n.type in ("preproc_def", "preproc_function_def") and any(b in sx.text(n) for b in builtins):
            return f"line {n.start_point[0] + 1}: a macro reads a launch builtin (its uses are not read as the builtin)"
    for n in nodes:  # the builtin itself copied, passed or addressed: its fields are read where the pass cannot see
        if n.type == "identifier" and sx.text(n) in builtins and not (
                n.parent is not None and n.parent.type == "field_expression" and n.parent.child_by_field_name("argument") == n):
            return f"line {n.start_point[0] + 1}: {sx.text(n)} is used whole (copied, passed or addressed), not as its fields"
    for n in nodes:  # a thread's place in its block, its block's place or shape, read apart from the global index
        for var in ("threadIdx", "blockIdx", "blockDim"):
            if n.type == "field_expression" and sx.is_ident(n.child_by_field_name("argument"), var):
                f = sx.text(n.child_by_field_name("field"))
                if f in "xy" and not _in_global_index(n, var, f):
                    return (f"line {n.start_point[0] + 1}: {var}.{f} is read other than in blockIdx.{f} * blockDim.{f} + "
                            f"threadIdx.{f}: what a thread does may depend on its block's shape")
    return None


# warp-level intrinsics beyond syntax.COLLECTIVES: the *_sync family (__reduce_max_sync, __match_all_sync, ...), lane masks
_WARP_LEVEL = re.compile(r"_sync$|^__reduce_|^__match_|^__activemask$|^__lanemask|^__syncwarp$")


def _in_global_index(n: Node, var: str, f: str) -> bool:
    """Whether the builtin ``n`` (``threadIdx.f``, ``blockIdx.f`` or ``blockDim.f``) is in ``blockIdx.f * blockDim.f +
    threadIdx.f`` (either order, parenthesised or cast): a thread's global index along ``f``, nothing else."""
    def up(m: Node) -> Node | None:
        p = m.parent
        while p is not None and p.type in ("parenthesized_expression", "cast_expression"):
            m, p = p, p.parent
        return p

    p = up(n)
    if var == "blockDim":  # blockDim.f * blockIdx.f: the blockIdx side's check, from the product
        if p is None or p.type != "binary_expression" or sx.operator(p) != "*":
            return False
        others = [sx.uncast(sx.unparen(c)) for c in (p.child_by_field_name("left"), p.child_by_field_name("right"))]
        idx = next((o for o in others if sx.is_builtin(o, "blockIdx", f)), None)
        return idx is not None and _in_global_index(idx, "blockIdx", f)
    if var == "blockIdx":  # blockIdx.f * blockDim.f, then that product + threadIdx.f
        if p is None or p.type != "binary_expression" or sx.operator(p) != "*":
            return False
        factors = (p.child_by_field_name("left"), p.child_by_field_name("right"))
        if not any(sx.is_builtin(sx.uncast(sx.unparen(c)), "blockDim", f) for c in factors):
            return False
        n, p = p, up(p)
    if p is None or p.type != "binary_expression" or sx.operator(p) != "+":
        return False
    terms = [p.child_by_field_name("left"), p.child_by_field_name("right")]
    if var == "threadIdx":
        return any(_mixes(sx.uncast(sx.unparen(t)), set(), set(), f) for t in terms)
    return any(sx.is_builtin(sx.uncast(sx.unparen(t)), "threadIdx", f) for t in terms)


def _has_launch_bounds(kernel: Node) -> bool:
    return any(c.type == "launch_bounds" for c in kernel.children)


def _launch_limit(kernel: Node, consts: dict) -> int | str:
    """The threads ``__launch_bounds__(N)`` allows ``kernel`` (the hardware's 1024 without one), or
    :data:`LAUNCH_BOUNDS_UNKNOWN` when N is not a known constant."""
    bound = next((c for c in kernel.children if c.type == "launch_bounds"), None)
    if bound is None:
        return MAX_THREADS  # (see _has_launch_bounds)
    args = [a for a in bound.named_children if a.type != "comment"]
    n = _const(args[0], consts) if args else None
    return n if n is not None else LAUNCH_BOUNDS_UNKNOWN.format(arg=sx.text(args[0]) if args else "")


def _rescale_2d(parent: Candidate, spec: KernelSpec, old: tuple[int, int], new: tuple[int, int]) -> list | str:
    """The grid covering the parent's work with block ``new`` instead of ``old`` (x, y): each of the first two
    dimensions' divisions by its block dimension rescaled (:func:`_rewrite`), the rest unchanged; or why not."""
    grid = list(parent.launch.grid)
    out = []
    for d, g in enumerate(grid):
        if d < 2 and old[d] != new[d]:
            r = _rewrite(g, old[d], new[d], None)
            if r is None or r[1] == 0 or r[2]:
                return GRID_BAD.format(grid=grid)
            out.append(r[0])
        else:
            out.append(g)
    for size in spec.check.sizes + spec.bench.sizes:
        try:
            dims = [int(evaluate(g, size)) for g in out]
        except ExprError as e:
            return f"grid {out} cannot be evaluated at {size}: {e}"
        if not all(1 <= d <= lim for d, lim in zip(dims, MAX_GRID_DIMS)):
            return f"grid {out} with block {new[0]}x{new[1]} is {dims} at {size}: outside the hardware's {list(MAX_GRID_DIMS)}"
    return out


# ---------------------------------------------------------------- the code's facts


def block_facts(parent: Candidate, b0: int) -> BlockFacts:
    """The :class:`BlockFacts` of ``parent``'s kernel, launched with ``b0`` threads per block."""
    root = sx.parse(parent.source.encode()).root_node
    kernel = _kernel_node(root, parent.kernel_name)
    if kernel is None:
        return BlockFacts(fixed=f"kernel {parent.kernel_name} not found in the source")
    fns = _reachable(root, kernel)
    consts = _constants(root, parent, kernel)
    nodes = [n for fn in fns for n in sx.walk(fn)]
    if not any(sx.is_builtin(n, "blockDim", f) for n in nodes if n.type == "field_expression" for f in "xyz"):
        return BlockFacts(fixed=NO_BLOCKDIM)
    for n in nodes:
        if n.type == "binary_expression" and _blockidx_times(n, consts) == b0:
            return BlockFacts(fixed=BLOCKIDX_TIMES_BLOCK.format(b0=b0))
    shared = _shared_arrays(root, fns, consts, parent.launch.shared_mem)
    for n in nodes:
        c = _halving_from_constant(n, consts)
        if c is not None and any(sx.is_ident(m) and sx.text(m) in shared for m in sx.walk(n.child_by_field_name("body"))):
            return BlockFacts(fixed=CONSTANT_STRIDE.format(c=c))
    limit = _launch_limit(kernel, consts)
    if isinstance(limit, str):
        return BlockFacts(fixed=limit)
    why = LAUNCH_BOUNDS.format(n=limit) if _has_launch_bounds(kernel) else None
    scales = _thread_scales(fns, consts)
    aliases = _thread_aliases(fns)
    for name, dims in shared.items():
        for index, dim in _shared_uses(fns, name, dims):
            s = _scale(index, scales, consts) if index is not None else Fraction(1)
            if s is None:
                continue
            guard = _guard(index, aliases, consts) if index is not None else None
            if guard is not None and s != _UNKNOWN and dim is not None and guard <= dim * s:
                continue  # only threads below the guard get here, and they stay within the array
            label = sx.text(index) if index is not None else name
            if s == _UNKNOWN:
                return BlockFacts(fixed=UNKNOWN_INDEX.format(name=name, index=label))
            if dim is None:
                return BlockFacts(fixed=UNKNOWN_SIZE.format(name=name))
            cap = int(dim * s)
            if cap < limit:
                limit, why = cap, SHARED_BOUND.format(name=name, size=dim, bound=cap)
    bi = _derived(fns, "blockIdx")
    bd = _derived(fns, "blockDim")
    scaled = any(_mixes(n, bi, bd) for n in nodes)
    grid_stride = any(sx.is_builtin(n, "gridDim", f) for n in nodes if n.type == "field_expression" for f in "xyz")
    return BlockFacts(fixed=None, max_threads=limit, limit=why, scaled=scaled, grid_stride=grid_stride)


def _kernel_node(root: Node, name: str) -> Node | None:
    for n in sx.walk(root):
        if n.type == "function_definition" and any(c.type == "__global__" for c in n.children) and _fn_name(n) == name:
            return n
    return None


def _fn_name(fn: Node) -> str | None:
    decl = sx.function_declarator(fn)
    if decl is None:
        return None
    name = decl.child_by_field_name("declarator")
    if name is not None and name.type in ("qualified_identifier", "template_function"):
        name = name.child_by_field_name("name")
    return sx.text(name) if name is not None else None


def _reachable(root: Node, kernel: Node) -> list[Node]:
    """``kernel`` and every function definition of the source it calls, directly or not (by name)."""
    by_name: dict[str, list[Node]] = {}
    for n in sx.walk(root):
        if n.type == "function_definition" and n is not kernel:
            by_name.setdefault(_fn_name(n) or "", []).append(n)
    out, todo, seen = [], [kernel], set()
    while todo:
        fn = todo.pop()
        if fn.id in seen:
            continue
        seen.add(fn.id)
        out.append(fn)
        for n in sx.walk(fn):
            if n.type == "call_expression":
                f = n.child_by_field_name("function")
                if f is not None and f.type in ("template_function", "qualified_identifier"):
                    f = f.child_by_field_name("name")
                todo.extend(by_name.get(sx.text(f), []))
    return out


def _constants(root: Node, parent: Candidate, kernel: Node) -> dict[str, int]:
    """Integer constants by name: ``#define N 256``, ``const``/``constexpr`` integers initialised by a
    constant, the kernel template's arguments and ``-DN=256`` options (later ones win). A name given two
    different values is dropped."""
    out: dict[str, int | None] = {}

    def put(name: str, value: int | None) -> None:
        out[name] = value if out.get(name, value) == value else None

    for n in sx.walk(root):
        if n.type == "preproc_def":
            name, arg = n.child_by_field_name("name"), n.child_by_field_name("value")
            if name is not None and arg is not None:
                put(sx.text(name), _int(sx.text(arg).strip().rstrip("uUlL").strip("()")))
    for _ in range(2):  # constants defined from constants
        for n in sx.walk(root):
            if n.type == "declaration" and any(sx.text(c) in ("const", "constexpr") for c in n.children if c.type == "type_qualifier"):
                for d in n.children_by_field_name("declarator"):
                    if d.type == "init_declarator" and sx.is_ident(d.child_by_field_name("declarator")):
                        put(sx.text(d.child_by_field_name("declarator")), _const(d.child_by_field_name("value"), out))
    template = kernel.parent
    while template is not None and template.type == "linkage_specification":
        template = template.parent
    if template is not None and template.type == "template_declaration" and parent.template_args:
        params = template.child_by_field_name("parameters")
        names = [sx.text(sx.innermost_identifier(p.child_by_field_name("declarator")) or p)
                 for p in params.named_children if p.child_by_field_name("declarator") is not None]
        for name, value in zip(names, parent.template_args):
            out[name] = _int(value)
    for o in parent.options:
        if o.startswith("-D") and "=" in o:
            name, value = o[2:].split("=", 1)
            out[name] = _int(value)
    return {k: v for k, v in out.items() if v is not None}


def _const(node: Node | None, consts: dict) -> int | None:
    """The integer value of a constant expression (literals, known names, + - * / % << >>, casts), or None."""
    node = sx.uncast(node)
    if node is None:
        return None
    if node.type == "number_literal":
        v = sx.literal_value(node)
        return v if isinstance(v, int) else None
    if node.type == "identifier":
        return consts.get(sx.text(node))
    if node.type == "binary_expression":
        a, b = _const(node.child_by_field_name("left"), consts), _const(node.child_by_field_name("right"), consts)
        if a is None or b is None:
            return None
        op = sx.operator(node)
        ops = {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "/": lambda: a // b if b else None,
               "%": lambda: a % b if b else None, "<<": lambda: a << b if 0 <= b < 64 else None, ">>": lambda: a >> b if b >= 0 else None}
        return ops[op]() if op in ops else None
    return None


def _blockidx_times(n: Node, consts: dict, field: str = "x") -> int | None:
    """``c`` of ``blockIdx.x * c``, ``c * blockIdx.x`` or ``blockIdx.x << k`` (``c = 2^k``), c a constant
    (``blockIdx.y``'s for ``field`` "y")."""
    op = sx.operator(n)
    left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
    if op == "*":
        for a, b in ((left, right), (right, left)):
            if sx.is_builtin(a, "blockIdx", field):
                return _const(b, consts)
    if op == "<<" and sx.is_builtin(left, "blockIdx", field):
        k = _const(right, consts)
        return 1 << k if k is not None and 0 <= k < 31 else None
    return None


def _halving_from_constant(n: Node, consts: dict) -> int | None:
    """``C`` of a ``for`` loop that starts a variable at the constant ``C`` and halves it each step."""
    if n.type != "for_statement" or n.child_by_field_name("body") is None:
        return None
    init, update = n.child_by_field_name("initializer"), n.child_by_field_name("update")
    var, start = None, None
    if init is not None and init.type == "declaration":
        ds = init.children_by_field_name("declarator")
        if len(ds) == 1 and ds[0].type == "init_declarator":
            var, start = ds[0].child_by_field_name("declarator"), ds[0].child_by_field_name("value")
    elif init is not None and init.type == "assignment_expression" and sx.operator(init) == "=":
        var, start = init.child_by_field_name("left"), init.child_by_field_name("right")
    if not sx.is_ident(var) or update is None or update.type != "assignment_expression":
        return None
    c = _const(start, consts)
    if c is None:
        return None
    name, op = sx.text(var), sx.operator(update)
    left, right = update.child_by_field_name("left"), sx.uncast(update.child_by_field_name("right"))
    if not sx.is_ident(left, name):
        return None
    halves = (op == ">>=" and sx.is_number(right, 1)) or (op == "/=" and sx.is_number(right, 2))
    if op == "=" and right is not None and right.type == "binary_expression" and sx.is_ident(sx.uncast(right.child_by_field_name("left")), name):
        inner = sx.operator(right), right.child_by_field_name("right")
        halves = (inner[0] == ">>" and sx.is_number(inner[1], 1)) or (inner[0] == "/" and sx.is_number(inner[1], 2))
    return c if halves else None


def _shared_arrays(root: Node, fns: list[Node], consts: dict, shared_mem) -> dict[str, list[int | None]]:
    """``__shared__`` arrays declared at file scope or in the reachable functions: name -> dimension sizes
    (outermost first; None when not a known constant; a dynamic array's one dimension from the launch's
    literal bytes and its element size)."""
    out: dict[str, list[int | None]] = {}
    scopes = [root] + fns
    seen = set()
    for scope in scopes:
        for n in sx.walk(scope):
            if n.type != "declaration" or n.id in seen:
                continue
            seen.add(n.id)
            if not any(c.type == "type_qualifier" and sx.text(c) == "__shared__" for c in n.children):
                continue
            extern = any(c.type == "storage_class_specifier" and sx.text(c) == "extern" for c in n.children)
            elem = ELEMENT_BYTES.get(sx.type_text(n.child_by_field_name("type")))
            for d in n.children_by_field_name("declarator"):
                dims = []
                while d is not None and d.type == "array_declarator":
                    size = d.child_by_field_name("size")
                    dims.insert(0, _const(size, consts) if size is not None else None)
                    d = d.child_by_field_name("declarator")
                if not sx.is_ident(d) or not dims:
                    continue
                if extern and dims[0] is None:
                    total = _int(shared_mem) if not isinstance(shared_mem, str) or shared_mem.strip().isdigit() else None
                    dims[0] = total // elem if total is not None and elem else None
                out[sx.text(d)] = dims
    return out


def _shared_uses(fns: list[Node], name: str, dims: list[int | None]):
    """``(index, dimension size)`` for each subscript of the shared array ``name``; ``(None, first
    dimension)`` for a use of the whole array (passed on, its address taken)."""
    for fn in fns:
        for n in sx.walk(fn):
            if not sx.is_ident(n, name) or n.parent is None or n.parent.type in ("array_declarator", "init_declarator", "declaration"):
                continue
            node, k = n, 0
            while node.parent is not None and node.parent.type == "subscript_expression" and node.parent.child_by_field_name("argument") == node:
                node = node.parent
                idx = [c for c in node.child_by_field_name("indices").named_children if c.type != "comment"]
                if len(idx) == 1 and k < len(dims):
                    yield idx[0], dims[k]
                k += 1
            if k == 0:
                yield None, dims[0]


def _thread_aliases(fns: list[Node]) -> set[str]:
    """Names only ever assigned ``threadIdx.x`` (``int tid = threadIdx.x;``)."""
    values: dict[str, list[Node]] = {}
    for name, value in _assignments(fns):
        values.setdefault(name, []).append(value)
    return {n for n, vs in values.items() if all(sx.is_builtin(v, "threadIdx", "x") for v in vs)}


def _guard(node: Node, aliases: set[str], consts: dict) -> int | None:
    """The smallest ``C`` of the guards ``threadIdx.x < C`` (or ``<= C - 1``, an alias of ``threadIdx.x``,
    one conjunct of ``&&``) whose true branch (``if``, ``?:``) holds ``node``; None when there is none."""
    best, child, up = None, node, node.parent
    while up is not None:
        cond = None
        if up.type == "if_statement" and up.child_by_field_name("consequence") == child:
            clause = up.child_by_field_name("condition")
            cond = clause.child_by_field_name("value") if clause is not None else None
        elif up.type == "conditional_expression" and up.child_by_field_name("consequence") == child:
            cond = up.child_by_field_name("condition")
        for c in sx.conjuncts(cond):
            bound = _thread_below(c, aliases, consts)
            if bound is not None and (best is None or bound < best):
                best = bound
        child, up = up, up.parent
    return best


def _thread_below(cond: Node, aliases: set[str], consts: dict) -> int | None:
    """``C`` when ``cond`` says ``threadIdx.x < C`` (``tid < C``, ``C > tid``, ``tid <= C - 1``), C a constant."""
    if cond.type != "binary_expression":
        return None
    op, left, right = sx.operator(cond), cond.child_by_field_name("left"), cond.child_by_field_name("right")
    if op in (">", ">="):
        op, left, right = {">": "<", ">=": "<="}[op], right, left
    if op not in ("<", "<="):
        return None
    thread = sx.uncast(left)
    if not (sx.is_builtin(thread, "threadIdx", "x") or (sx.is_ident(thread) and sx.text(thread) in aliases)):
        return None
    c = _const(right, consts)
    return None if c is None else c + (op == "<=")


def _thread_scales(fns: list[Node], consts: dict) -> dict[str, Fraction]:
    """Names whose value grows with ``threadIdx.x``: name -> scale ``s`` (the value is at most about
    ``threadIdx.x / s``; 0: unknown growth), over every assignment of the name (the smallest scale)."""
    sites = _assignments(fns)
    scales: dict[str, Fraction] = {}
    for _ in range(8):
        changed = False
        for name, value in sites:
            s = _scale(value, scales, consts)
            if s is not None and (name not in scales or s < scales[name]):
                scales[name], changed = s, True
        if not changed:
            return scales
    return {k: _UNKNOWN for k in scales}  # still growing: no bound


def _assignments(fns: list[Node]) -> list[tuple[str, Node]]:
    """``(name, value)`` for each declaration with an initialiser and each assignment to a plain name
    (``x op= e`` gives the value ``x op e``, the binary node being the assignment itself)."""
    out = []
    for fn in fns:
        for n in sx.walk(fn):
            if n.type == "init_declarator" and sx.is_ident(n.child_by_field_name("declarator")):
                value = n.child_by_field_name("value")
                if value is not None:
                    out.append((sx.text(n.child_by_field_name("declarator")), value))
            elif n.type == "assignment_expression" and sx.is_ident(sx.unparen(n.child_by_field_name("left"))):
                out.append((sx.text(sx.unparen(n.child_by_field_name("left"))), n))
    return out


def _scale(node: Node | None, scales: dict, consts: dict) -> Fraction | None:
    """How an index grows with ``threadIdx.x``: None (it does not, or is bounded independently of the
    block: ``tid % 32``, a comparison), ``s`` (at most about ``threadIdx.x / s``) or 0 (unknown)."""
    node = sx.uncast(node)
    if node is None:
        return None
    t = node.type
    if t == "field_expression":
        return Fraction(1) if sx.is_builtin(node, "threadIdx", "x") else None
    if t == "identifier":
        return scales.get(sx.text(node))
    if t in ("number_literal", "sizeof_expression", "char_literal"):
        return None
    if t == "assignment_expression":
        op = sx.operator(node)
        if op == "=":
            return _scale(node.child_by_field_name("right"), scales, consts)
        return _binary(op[:-1], node.child_by_field_name("left"), node.child_by_field_name("right"), scales, consts)
    if t == "binary_expression":
        return _binary(sx.operator(node), node.child_by_field_name("left"), node.child_by_field_name("right"), scales, consts)
    if t == "conditional_expression":
        parts = [_scale(node.child_by_field_name(f), scales, consts) for f in ("consequence", "alternative")]
        parts = [p for p in parts if p is not None]
        return min(parts) if parts else None
    if t == "unary_expression" and sx.operator(node) in ("!",):
        return None
    thread = any(sx.is_builtin(n, "threadIdx", "x") or (n.type == "identifier" and sx.text(n) in scales) for n in sx.walk(node))
    return _UNKNOWN if thread else None


def _binary(op: str, left: Node, right: Node, scales: dict, consts: dict) -> Fraction | None:
    sl, sr = _scale(left, scales, consts), _scale(right, scales, consts)
    if sl is None and sr is None:
        return None
    if op in ("<", ">", "<=", ">=", "==", "!=", "&&", "||"):
        return None  # 0 or 1
    if op in ("%", "&"):
        return None if (_const(right, consts) is not None or (op == "&" and _const(left, consts) is not None)) else _UNKNOWN
    if op in ("+", "-", "|", "^"):
        return min(s for s in (sl, sr) if s is not None)
    if op in ("/", ">>"):
        c = _const(right, consts)
        if sr is not None or c is None or c < 0 or (op == "/" and c == 0):
            return _UNKNOWN
        return sl * (c if op == "/" else 2**min(c, 31))
    if op in ("*", "<<"):
        s, other = (sl, right) if sr is None else (sr, left) if sl is None else (None, None)
        c = _const(other, consts) if s is not None else None
        if c is None or c <= 0 or (op == "<<" and other is left):
            return _UNKNOWN
        return s / (c if op == "*" else 2**min(c, 31))
    return _UNKNOWN


def _derived(fns: list[Node], builtin: str, field: str | None = None) -> set[str]:
    """Names whose value is computed from ``builtin`` (``blockIdx``/``blockDim``; its ``field`` only, when given),
    directly or through other names, and functions that return such a value (``__device__ int stride() { return
    blockDim.x; }``)."""
    floats = _float_names(fns)
    sites = [(n, v) for n, v in _assignments(fns) if n not in floats]
    sites += [(_fn_name(fn) or "", n) for fn in fns for n in sx.walk(fn) if n.type == "return_statement"]
    names: set[str] = set()
    for _ in range(8):
        before = len(names)
        for name, value in sites:
            if name not in names and _mentions(value, builtin, names, field):
                names.add(name)
        if len(names) == before:
            break
    return names


def _float_names(fns: list[Node]) -> set[str]:
    """Names declared with a floating-point type in the functions (data values, never an index)."""
    out = set()
    for fn in fns:
        for name, ctype in sx.Types(fn).scalar.items():
            words = [w for w in (ctype or "").split() if w not in ("const", "volatile")]
            if words and words[-1] in _FLOAT_TYPES:
                out.add(name)
    return out


_FLOAT_TYPES = frozenset({"float", "double", "__half", "half", "__nv_bfloat16", "nv_bfloat16", "__half2", "__nv_bfloat162",
                          "float2", "float4", "double2"})


def _mentions(node: Node, builtin: str, names: set[str], field: str | None = None) -> bool:
    """``node`` reads ``builtin`` (its ``field`` only, when given) or one of ``names``, other than inside a memory
    access (``x[row * N + i]``, ``*p`` and ``__ldg(x + i)`` are data, not an index computed from them)."""
    stack = [node]
    while stack:
        n = stack.pop()
        if n.type == "field_expression" and sx.is_ident(n.child_by_field_name("argument"), builtin) and (
                field is None or sx.text(n.child_by_field_name("field")) == field):
            return True
        if n.type == "identifier" and sx.text(n) in names:
            return True
        if n.type == "subscript_expression" or (n.type == "pointer_expression" and sx.operator(n) == "*"):
            continue
        if n.type == "call_expression" and (sx.call_name(n) or "").startswith(("__ld", "ptxf_ld")):
            continue  # a load intrinsic: its value is data
        stack.extend(n.children)
    return False


def _mixes(n: Node, bi: set[str], bd: set[str], field: str | None = None) -> bool:
    """``n`` multiplies something computed from ``blockIdx`` by something computed from ``blockDim`` (their
    ``field`` only, when given; ``*``, ``__umul24``, ``__mul24``): the work of block ``k`` starts at ``k`` blocks'
    worth of threads."""
    if n.type == "binary_expression" and sx.operator(n) == "*":
        pair = (n.child_by_field_name("left"), n.child_by_field_name("right"))
    elif sx.call_name(n) in ("__umul24", "__mul24") and len(sx.call_args(n)) == 2:
        pair = tuple(sx.call_args(n))
    else:
        return False
    a, b = pair
    return ((_mentions(a, "blockIdx", bi, field) and _mentions(b, "blockDim", bd, field))
            or (_mentions(b, "blockIdx", bi, field) and _mentions(a, "blockDim", bd, field)))


# ---------------------------------------------------------------- the grid


def rescale_grid(parent: Candidate, spec: KernelSpec, facts: BlockFacts, b0: int, b1: int) -> list | str:
    """The grid that covers the parent's work with ``b1`` threads per block (see the module docstring),
    or the reason it cannot be recomputed."""
    grid = list(parent.launch.grid)
    cap = parent.params.get("grid_cap")
    first = _rewrite(grid[0], b0, b1, cap if isinstance(cap, int) else None)
    if first is None:
        return GRID_BAD.format(grid=grid)
    text, hits, leftovers = first
    for g in grid[1:]:
        other = _rewrite(g, b0, b1, None)
        if other is None or other[1] or other[2]:
            return GRID_BAD.format(grid=grid)
    if facts.scaled and not facts.grid_stride:
        if hits == 0:
            return GRID_FIXED.format(grid=grid)
        if leftovers:
            return GRID_BAD.format(grid=grid)
    elif not facts.scaled and hits:
        return GRID_UNSCALED.format(grid=grid)
    new = [grid[0] if text == str(grid[0]).strip() else text] + grid[1:]
    for size in spec.check.sizes + spec.bench.sizes:
        try:
            if not all(1 <= int(evaluate(g, size)) < 2**31 for g in new):
                return GRID_SIZES.format(grid=new, b1=b1)
        except ExprError:
            return GRID_SIZES.format(grid=new, b1=b1)
    return new


def _rewrite(expr, b0: int, b1: int, cap: int | None) -> tuple[str, int, bool] | None:
    """``(new text, divisions rewritten, other literals that are multiples of b0 left)`` for one grid
    expression; None when it does not parse."""
    try:
        tree = ast.parse(str(expr).strip(), mode="eval")
    except SyntaxError:
        return None
    rewriter = _Rescale(b0, b1, cap)
    tree = rewriter.visit(tree)
    leftovers = any(
        isinstance(n, ast.Constant) and isinstance(n.value, int) and id(n) not in rewriter.done and rewriter.multiple(n.value)
        for n in ast.walk(tree)
    )
    if not rewriter.hits and not rewriter.capped:
        return str(expr).strip() if isinstance(expr, str) else str(expr), 0, leftovers
    return ast.unparse(tree), rewriter.hits, leftovers


class _Rescale(ast.NodeTransformer):
    """Divisions by a multiple of ``b0`` become divisions by the same multiple of ``b1``; ``min(G, cap)``'s cap
    becomes ``cap * b0 / b1`` (rounded up)."""

    def __init__(self, b0: int, b1: int, cap: int | None):
        self.b0, self.b1, self.cap = b0, b1, cap
        self.hits, self.capped, self.done = 0, False, set()

    def multiple(self, c: int) -> bool:
        """A literal that stands for the block: ``b0`` itself, or (for a block of at least a warp) a multiple."""
        return c == self.b0 or (self.b0 >= 32 and c > 0 and c % self.b0 == 0)

    def _scaled(self, c: ast.Constant) -> ast.Constant:
        new = ast.Constant(c.value // self.b0 * self.b1)
        self.done.add(id(new))
        return new

    def visit_Call(self, node: ast.Call):
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and len(node.args) == 2 and not node.keywords:
            a, c = node.args
            if node.func.id == "cdiv" and _is_int(c) and self.multiple(c.value):
                node.args[1] = self._scaled(c)
                self.hits += 1
            elif node.func.id == "min" and self.cap is not None and _is_int(c) and c.value == self.cap:
                node.args[1] = ast.Constant(-(-c.value * self.b0 // self.b1))
                self.done.add(id(node.args[1]))
                self.capped = True
        return node

    def visit_BinOp(self, node: ast.BinOp):
        self.generic_visit(node)
        if isinstance(node.op, ast.FloorDiv) and _is_int(node.right) and self.multiple(node.right.value):
            c = node.right.value
            left = node.left
            if isinstance(left, ast.BinOp) and isinstance(left.op, ast.Add) and _is_int(left.right) and left.right.value == c - 1:
                left.right = ast.Constant(c // self.b0 * self.b1 - 1)
                self.done.add(id(left.right))
            node.right = self._scaled(node.right)
            self.hits += 1
        return node


def _is_int(n) -> bool:
    return isinstance(n, ast.Constant) and isinstance(n.value, int) and not isinstance(n.value, bool)


def _int(v) -> int | None:
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().isdigit():
        return int(v.strip())
    return None
