"""``scan``: a prefix sum (scan) written one thread per row gets a warp or a block per row, scanned in chunks.

Pattern: :mod:`.rowpar`'s one-thread-per-row opening (``T r = blockIdx.x * blockDim.x + threadIdx.x;``,
declarations, then ``if (r >= n) return;`` or a final ``if (r < n) {...}``), ``launch.policy = "free"``, a literal
1-D block; in the row's code exactly one loop, ``for (T j = a; j < b; j++)`` at its top level, that carries one
variable, the accumulator ``acc`` (declared before the loop), updated as a recognised accumulation
(:func:`.reductions.loop_accumulators`: ``acc += f(j)``, ``acc = acc * f(j)``, ``acc = fmaxf(acc, f(j))``,
``if (f(j) > acc) acc = f(j);``, ... : a sum, product, max or min) and read by stores ``q[base + j] = g(acc, j)``
before the update (an exclusive scan) or after it (inclusive), in any number of buffers::

    float acc = 0.0f;
    for (int j = 0; j < N; j++) { acc += x[r * N + j]; y[r * N + j] = acc; }
    total[r] = acc;                                  // the row's total after the loop: one lane writes it

A top-level statement of the loop body that writes memory is a *store*: it writes no variable and declares nothing;
the other statements (the update, locals, loads) write no memory, read ``acc`` only in its update and read no buffer
a store before them wrote (an in-place scan, ``v = x[j]; acc += v; x[j] = acc;``, reads before it stores). Every access
in the loop to a buffer the loop writes is at one index, ``c * j + base`` (``c`` a nonzero integer, ``base`` free of
``j``), the one its stores write: each iteration owns its elements (``y[j - 1]`` read back is refused). Statements
before the loop write no memory; after it, a statement that writes memory runs on the row's first lane (after a
barrier where it reads a buffer the loop wrote), and ``acc`` holds the row's total on every lane.

Rewrite (``ITEMS`` = :data:`ITEMS` consecutive elements a lane, ``L`` lanes a row): the loop becomes a loop over
chunks of ``L x ITEMS`` elements; in each, lane ``l`` takes elements ``l * ITEMS .. l * ITEMS + ITEMS - 1`` of the
chunk and

1. runs the loop body over its items without the stores, its accumulator renamed and started at the operation's
   identity (a max/min at the running value, which is idempotent): its part;
2. scans the parts (inclusive ``__shfl_up_sync`` scan within the warp; for a block, the warps' totals through shared
   memory), so its running value is the carry from the previous chunks combined with the parts of the lanes below
   it; the carry becomes the carry combined with every part (the last lane's inclusive value, broadcast);
3. runs the loop body again over its items, from that running value, stores included: the stores see what they saw
   in the serial loop, exclusive or inclusive alike.

After the loop, ``acc`` is the carry. Variants: ``scan_warp`` (a warp per row, 256-thread blocks), ``scan_block256``
(a block of 256 per row) and ``scan_auto`` (lanes chosen at launch from the row length and, with the GPU's facts, the
row count: a warp for rows up to :data:`WARP_ELEMENTS` elements when the rows fill the GPU, else a block of 256). The
launch is rowpar's (grid = rows / rows per block). Floating-point sums and products are re-associated (not exact):
refused when the spec asks for exact results (``rtol = atol = 0``); integer sums and every max/min are exact.

Refused (the reason says which): what rowpar refuses about the opening and the row's code as a whole (barriers,
``threadIdx`` in the row's code, shared data, asm), a fixed launch, not exactly one loop in the row's code, a loop
that carries no variable or more than one, an update that is not a sum/product/max/min, ``acc`` read other than by
the update and the stores (a local computed from it), no store reading ``acc`` (a reduction: rowpar's case), a
store under a statement that also sets variables, a written buffer accessed at another index or at an index not
affine in ``j``, ``break``/``continue``/``return``/``goto`` in the loop, memory written before the loop, a buffer
written after the loop read again, an accumulator type that cannot be shuffled.
"""
from __future__ import annotations

from dataclasses import dataclass

from ptxfactory.protocol import LaunchConfig
from ptxfactory.protocol.expr import ExprError, evaluate

from . import syntax as sx
from .affine import Poly, add, poly, split
from .base import LOAD_FUNCS, STORE_FUNCS, Unit
from .grid_stride import FACTS_NOTE, ElementGuard, threads_per_sm
from .reductions import loop_accumulators
from .rowpar import (GROUP_BLOCK, HELPER_NEEDS, HELPERS, LANE, MAX_GRID, SHUFFLE_TYPES, PlannedPass, Refused,
                     RowParallelPass, _base_name, _check_whole, _local_arrays, _Rewrite, _row_guard, access_base, helper_closure, index_statement,
                     index_poly, loop_head, pointer_offsets, pointer_roots, row_constants, rows_expression, spec_expression, written_roots)
from .syntax import Node

ITEMS = 8  # consecutive elements a lane takes in each chunk
WARP_ELEMENTS = 2048  # scan_auto: a warp per row up to rows this long (64 elements a lane), when the rows fill the GPU
BLOCK_LANES = 256

HELPERS.update({
    "ptxf_warp_scan": """\
template <typename T, typename F>
static __device__ __forceinline__ T ptxf_warp_scan(T v, F op)
{   // inclusive scan over the warp's 32 lanes: lane l ends with op over lanes 0..l, in order
    const unsigned lane = threadIdx.x & 31u;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const T t = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= (unsigned)o) v = op(t, v);
    }
    return v;
}""",
    "ptxf_warp_scan_start": """\
template <typename T, typename F>
static __device__ __forceinline__ T ptxf_warp_scan_start(T part, T& carry, F op)
{   // a warp per row: this lane's running value (carry, then the parts of the lanes below it); carry takes every part
    const T incl = ptxf_warp_scan(part, op);
    const T below = __shfl_up_sync(0xffffffffu, incl, 1);
    const T total = __shfl_sync(0xffffffffu, incl, 31);
    const T start = (threadIdx.x & 31u) == 0u ? carry : op(carry, below);
    carry = op(carry, total);
    return start;
}""",
    "ptxf_block_scan_start": """\
template <typename T, typename F>
static __device__ __forceinline__ T ptxf_block_scan_start(T part, T& carry, F op)
{   // a block per row (blockDim.x a multiple of 32, blockDim.y == 1): the warps' totals through shared memory, in order
    __shared__ T ptxf_wsum[32];
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    const T incl = ptxf_warp_scan(part, op);
    const T below = __shfl_up_sync(0xffffffffu, incl, 1);
    if (lane == 31u) ptxf_wsum[warp] = incl;
    __syncthreads();
    T start = carry, total = carry;
    for (unsigned w = 0; w < (blockDim.x >> 5); ++w) {
        const T t = ptxf_wsum[w];
        if (w < warp) start = op(start, t);
        total = op(total, t);
    }
    __syncthreads();  // every warp has read the totals before the next chunk writes them
    if (lane != 0u) start = op(start, below);
    carry = total;
    return start;
}""",
    "ptxf_row_scan_start": """\
template <typename T, typename F>
static __device__ __forceinline__ T ptxf_row_scan_start(T part, T& carry, F op)
{   // the row's blockDim.x lanes: a warp (32) or the block
    if (blockDim.x > 32u) return ptxf_block_scan_start(part, carry, op);
    return ptxf_warp_scan_start(part, carry, op);
}""",
})
HELPER_NEEDS.update({
    "ptxf_warp_scan_start": ("ptxf_warp_scan",), "ptxf_block_scan_start": ("ptxf_warp_scan",),
    "ptxf_row_scan_start": ("ptxf_warp_scan_start", "ptxf_block_scan_start"),
})

NOT_ROW = ("not one thread per row (index = blockIdx.x * blockDim.x + threadIdx.x, then a guard) "
           "with a literal 1-D block and launch.policy = \"free\"")


@dataclass
class _Plan:
    guard: ElementGuard
    loop: Node
    j: str
    jtype: str
    start: Node
    end: str  # C expression of the loop's end (exclusive)
    acc: str
    ctype: str
    kind: str
    combine: str
    stores: list[Node]  # the loop body's store statements (dropped from the first pass)
    post: list[Node]  # statements after the loop that write memory (the first lane's)
    sync_after: bool  # code after the loop reads a buffer the loop wrote
    length: str | None
    launch: LaunchConfig


class ScanPass(PlannedPass):
    """A running accumulation stored per element, one thread per row -> a warp or a block per row, scanned in
    chunks (see the module docstring)."""

    group = "grid"  # an alternative to rowpar, vectorize, grid_stride: all redefine what a thread does
    exact = False  # float sums and products are re-associated

    def __init__(self, variant: str):
        if variant not in ("warp", "block256", "auto"):
            raise ValueError(f"scan: the variant must be 'warp', 'block256' or 'auto', not {variant!r}")
        self.variant = variant
        self.name = f"scan_{variant}"
        self.lanes = {"warp": 32, "block256": BLOCK_LANES, "auto": "auto"}[variant]

    # -- precondition ---------------------------------------------------------------------------------------

    def _plan(self, unit: Unit) -> _Plan:
        if unit.body is None:
            raise Refused("no kernel body")
        threads = unit.block_threads()
        g = _row_guard(unit)
        if g is None or threads is None:
            raise Refused(NOT_ROW)
        if sx.type_text(g.type_node) not in sx.INT_TYPES:
            raise Refused(f"row index type {sx.type_text(g.type_node)!r} is not an integer type")
        for stmt in g.rest:
            _check_whole(stmt)
        loops = [n for s in g.rest for n in sx.walk(s) if n.type in sx.LOOPS]
        top = [s for s in g.rest if s.type == "for_statement"]
        if len(loops) != 1 or len(top) != 1:
            raise Refused(f"the row's code has {len(loops)} loops; the scan takes exactly one, a for loop at its top level")
        loop = top[0]
        line = loop.start_point[0] + 1
        written_rest = set().union(*(sx.written_names(s) for s in g.rest))
        if written_rest & ({g.name} | sx.identifiers(g.bound)):
            raise Refused("the row index or the row count is written in the row's code")
        head = loop_head(loop)
        if head is None:
            raise Refused(f"the loop at line {line} is not for (T j = a; j < b; j++)")
        j, start = head
        jtype = sx.type_text(loop.child_by_field_name("initializer").child_by_field_name("type"))
        body = loop.child_by_field_name("body")
        cond = sx.unparen(loop.child_by_field_name("condition"))
        op = sx.operator(cond)
        bound = sx.unparen(cond.child_by_field_name("right" if op in ("<", "<=") else "left"))
        end = f"({sx.text(bound)})" + (" + 1" if op in ("<=", ">=") else "")
        if sx.contains_type(body, ("break_statement", "continue_statement", "return_statement", "goto_statement",
                                   "labeled_statement")):
            raise Refused(f"break, continue, return or goto in the loop at line {line}")
        written = sx.written_names(body)
        if j in written or (sx.identifiers(bound) & written):
            raise Refused(f"the loop variable or the bound is written in the loop at line {line}")
        declared = sx.declared_names(body)
        carried = (written - declared) - {j}
        if len(carried) != 1:
            raise Refused(f"the loop at line {line} carries {', '.join(sorted(carried)) or 'nothing'}: the scan takes "
                          "exactly one accumulator")
        acc = carried.pop()
        if acc in declared:
            raise Refused(f"{acc} is declared again in the loop")
        ctype = unit.types.scalar.get(acc)
        if ctype is None or ctype not in SHUFFLE_TYPES:
            raise Refused(f"{acc}'s type {ctype!r} cannot be shuffled")
        roots = pointer_roots(unit)
        arrays = _local_arrays(unit.body)
        # the body's statements: stores (write memory, nothing else) and the rest (write no memory)
        stmts = sx.statements(body) if body.type == "compound_statement" else [body]
        stores, stored = [], set()
        for s in stmts:
            w = _written_roots(s, roots, arrays)
            if not w:
                if any(roots.get(n) in stored for n in sx.identifiers(s)):
                    raise Refused(f"line {s.start_point[0] + 1}: the loop reads back what it stored (the scan's first pass "
                                  "runs without the stores)")
                continue
            stored |= w
            if s.type == "declaration" or sx.written_names(s) or sx.declared_names(s):
                raise Refused(f"line {s.start_point[0] + 1}: a statement of the loop both writes memory and sets "
                              "variables")
            stores.append(s)
        # the update, read without the stores: a recognised sum, product, max or min of acc alone
        probe = sx.apply_edits(unit.data, [(s.start_byte, s.end_byte, b";") for s in stores])
        probe_loop = next((n for n in sx.walk(sx.parse(probe).root_node)
                           if n.type == "for_statement" and n.start_byte == loop.start_byte), None)
        accs = None if probe_loop is None else loop_accumulators(probe_loop.child_by_field_name("body"), {acc}, j,
                                                                  start=start)
        a = accs.get(acc) if accs else None
        if a is None or a.kind not in ("sum", "prod", "max", "min"):
            raise Refused(f"{acc} in the loop at line {line}: not a sum, product, max or min updated alone "
                          f"({acc} read by the update and the stores only)")
        if not any(acc in sx.identifiers(s) for s in stores):
            raise Refused(f"no store in the loop at line {line} reads {acc} (a reduction, not a scan: rowpar's case)")
        if unit.spec.check.rtol == 0 and unit.spec.check.atol == 0 and a.kind in ("sum", "prod") and ctype in ("float", "double"):
            raise Refused(f"{acc}: a floating-point {'sum' if a.kind == 'sum' else 'product'}, re-associated by the "
                          "scan, and the spec asks for exact results")
        self._check_indices(unit, body, j, roots, arrays)
        # the statements around the loop
        pos = g.rest.index(loop)
        for s in g.rest[:pos]:
            if _written_roots(s, roots, arrays):
                raise Refused(f"line {s.start_point[0] + 1}: memory written before the loop")
        loop_roots = _written_roots(body, roots, arrays)
        post, sync_after = [], False
        after = g.rest[pos + 1:]
        for k, s in enumerate(after):
            names = set().union(*(sx.identifiers(t) for t in after[k:]))
            if any(roots.get(n) in loop_roots for n in names):
                sync_after = True
            w = _written_roots(s, roots, arrays)
            if not w:
                continue
            if s.type == "declaration":
                raise Refused(f"a declaration that writes memory: {sx.text(s)!r}")
            if sx.written_names(s) - sx.declared_names(s):
                raise Refused(f"line {s.start_point[0] + 1}: a statement after the loop writes memory and variables")
            later = set().union(set(), *(sx.identifiers(t) for t in after[k + 1:]))
            if any(roots.get(n) in w for n in later):
                raise Refused(f"line {s.start_point[0] + 1}: a buffer written after the loop is read again")
            post.append(s)
        length = spec_expression(unit, bound, start)
        if length is not None and op in ("<=", ">="):
            length = f"{length} + 1"
        launch = self._launch(unit, g, threads, length)
        return _Plan(g, loop, j, jtype, start, end, acc, ctype, a.kind, a.combine, stores, post, sync_after, length, launch)

    @staticmethod
    def _check_indices(unit: Unit, body: Node, j: str, roots: dict[str, str], arrays: set[str]) -> None:
        """Every access in the loop to a buffer it writes is at one index ``c * j + base`` (``c`` a nonzero integer):
        each iteration owns its elements, so the lanes never touch each other's."""
        written = _written_roots(body, roots, arrays)
        offsets = pointer_offsets(unit, roots)
        subst = row_constants(unit.body)
        subst.update(row_constants(body))
        subst.pop(j, None)
        seen: dict[str, Poly] = {}
        for n in sx.walk(body):
            if n.type == "call_expression" and sx.call_name(n) in LOAD_FUNCS | STORE_FUNCS and sx.call_args(n):
                arg = sx.unparen(sx.uncast(sx.call_args(n)[0]))
                if arg is not None and arg.type == "pointer_expression" and sx.operator(arg) == "&":
                    continue  # __ldg(&p[i]): the subscript inside is visited
                base = _base_name(arg)
                if roots.get(base) not in written:
                    continue
                f = None  # p + i: p's offset + i
                if sx.is_ident(sx.uncast(arg)):
                    f = offsets.get(base)
                elif arg.type == "binary_expression" and sx.operator(arg) == "+" and sx.is_ident(
                        sx.uncast(arg.child_by_field_name("left"))):
                    e = poly(arg.child_by_field_name("right"), subst)
                    f = None if e is None or base not in offsets else add(offsets[base], e)
                _same_index(n, f, j, roots[base], seen)
                continue
            if not (n.type == "subscript_expression" or (n.type == "pointer_expression" and sx.operator(n) == "*")):
                continue
            base = access_base(n)
            if base in arrays or roots.get(base) not in written:
                continue
            _same_index(n, index_poly(n, offsets, subst), j, roots[base], seen)

    def _launch(self, unit: Unit, g: ElementGuard, threads: int, length: str | None) -> LaunchConfig:
        if self.variant != "auto":
            return RowParallelPass(self.lanes)._launch(unit, g, threads, _Rewrite())
        if length is None:
            raise Refused("the loop's length is not an expression of the spec's sizes (lanes cannot follow it)")
        rows = rows_expression(unit, g.bound) or f"({unit.launch.grid[0]}) * {threads}"
        want = f"cdiv({length}, {WARP_ELEMENTS // 32})"
        facts = unit.notes.get(FACTS_NOTE)
        if facts is not None:  # too few rows to fill the GPU with warps: a block each
            want = f"max({want}, cdiv({facts.sm_count * threads_per_sm(facts.arch)}, {rows}))"
        big = f"min(1, max(0, {want} - 1) // 32)"  # 1 where a warp would take over WARP_ELEMENTS or not fill the GPU
        lanes = f"32 + {BLOCK_LANES - 32} * {big}"
        per_block = f"{GROUP_BLOCK // 32} - {GROUP_BLOCK // 32 - 1} * {big}"
        block, grid = [lanes, per_block], f"cdiv({rows}, {per_block})"
        for size in unit.spec.check.sizes + unit.spec.bench.sizes:
            try:
                if not 0 < int(evaluate(grid, size)) <= MAX_GRID:
                    raise Refused(f"grid {grid} out of range at {size}")
            except ExprError as e:
                raise Refused(f"launch {grid} / {block} cannot be evaluated at {size}: {e}") from None
        return LaunchConfig(grid=[grid], block=block, shared_mem=unit.launch.shared_mem)

    # -- rewrite ------------------------------------------------------------------------------------------------

    def apply(self, unit: Unit) -> Unit:
        p = self._plan(unit)
        data = unit.data
        g = p.guard
        ctype = sx.type_text(g.type_node)
        decl = sx.text(g.type_node)
        if self.variant == "auto":
            index = f"({ctype})((unsigned long long)blockIdx.x * blockDim.y + threadIdx.y)"
            lane = f"const unsigned {LANE} = threadIdx.x;"
            how = "a warp or a block per row, chosen at launch from the row length"
            lanes, fn, sync = "blockDim.x", "ptxf_row_scan_start", "if (blockDim.x > 32u) __syncthreads(); else __syncwarp();"
        elif self.variant == "block256":
            index = f"({ctype})blockIdx.x"
            lane = f"const unsigned {LANE} = threadIdx.x;"
            how = f"one block of {BLOCK_LANES} threads per row"
            lanes, fn, sync = f"{BLOCK_LANES}u", "ptxf_block_scan_start", "__syncthreads();"
        else:
            index = f"({ctype})(((unsigned long long)blockIdx.x * blockDim.x + threadIdx.x) / 32u)"
            lane = f"const unsigned {LANE} = threadIdx.x % 32u;"
            how = "a warp per row"
            lanes, fn, sync = "32u", "ptxf_warp_scan_start", "__syncwarp();"
        first = index_statement(unit, g)
        indent, _ = sx.line_indent(data, first.start_byte)
        edits = [(first.start_byte, first.end_byte,
                  f"{decl} {g.name} = {index};  // {how} (transform scan)\n{indent.decode()}{lane}".encode())]
        # the loop as a chunked scan
        loop, body = p.loop, p.loop.child_by_field_name("body")
        stores = {(s.start_byte, s.end_byte) for s in p.stores}

        def body_text(name: str, with_stores: bool) -> str:
            def rep(n: Node) -> bytes | None:
                if not with_stores and (n.start_byte, n.end_byte) in stores:
                    return b""
                if n.type == "identifier" and sx.text(n) == p.acc:
                    return name.encode()
                return None
            out = sx.render(body, data, rep).decode()
            return out if body.type == "compound_statement" else "{ " + out + " }"

        ind = sx.line_indent(data, loop.start_byte)[0].decode()
        jt, T = p.jtype, p.ctype
        init = {"sum": f"({T})0", "prod": f"({T})1"}.get(p.kind, p.acc)  # a max/min part may start at the running value
        op = f"[](const {T}& ptxf_a, const {T}& ptxf_b) {{ return ({T})({p.combine.format(a='ptxf_a', b='ptxf_b')}); }}"
        i1, i2, i3 = ind + "    ", ind + "        ", ind + "            "
        chunk = f"({jt})({lanes} * {ITEMS}u)"
        scan = (
            f"{{  // the loop over {p.j} as a chunked scan: {ITEMS} consecutive elements a lane (transform scan)\n"
            f"{i1}const {jt} ptxf_end = {p.end};\n"
            f"{i1}for ({jt} ptxf_c = ({sx.text(p.start)}); ptxf_c < ptxf_end; ptxf_c += {chunk}) {{\n"
            f"{i2}const {jt} ptxf_j0 = ptxf_c + ({jt})({LANE} * {ITEMS}u);\n"
            f"{i2}{T} ptxf_part = {init};  // this lane's items, without the stores\n"
            f"{i2}#pragma unroll\n"
            f"{i2}for (int ptxf_i = 0; ptxf_i < {ITEMS}; ++ptxf_i) {{\n"
            f"{i3}const {jt} {p.j} = ptxf_j0 + ({jt})ptxf_i;\n"
            f"{i3}if ({p.j} < ptxf_end) {body_text('ptxf_part', False)}\n"
            f"{i2}}}\n"
            f"{i2}{T} ptxf_run = {fn}(ptxf_part, {p.acc}, {op});  // the carry and the parts below\n"
            f"{i2}#pragma unroll\n"
            f"{i2}for (int ptxf_i = 0; ptxf_i < {ITEMS}; ++ptxf_i) {{\n"
            f"{i3}const {jt} {p.j} = ptxf_j0 + ({jt})ptxf_i;\n"
            f"{i3}if ({p.j} < ptxf_end) {body_text('ptxf_run', True)}\n"
            f"{i2}}}\n"
            f"{i1}}}\n"
            f"{ind}}}"
        )
        if p.sync_after:
            scan += f"\n{ind}{sync}  // the row's lanes see each other's stores (transform scan)"
        edits.append((loop.start_byte, loop.end_byte, scan.encode()))
        for s in p.post:
            sind = sx.line_indent(data, s.start_byte)[0].decode()
            edits.append((s.start_byte, s.start_byte,
                          f"if ({LANE} == 0u) {{  // one lane writes (transform scan)\n{sind}    ".encode()))
            edits.append((s.end_byte, s.end_byte, f"\n{sind}}}".encode()))
        helpers = helper_closure([fn])
        return unit.with_text(sx.apply_edits(data, edits), launch=p.launch, helpers=helpers, lanes=self.lanes)


def _same_index(n: Node, f: Poly | None, j: str, root: str, seen: dict[str, Poly]) -> None:
    """Refuses an access ``n`` to written buffer ``root`` at ``f`` unless ``f`` is ``c * j + base`` (``c`` a nonzero
    integer) and the index of every other access to ``root`` in the loop (``seen``, updated)."""
    parts = None if f is None else split(f, j)
    if parts is None or list(parts[0]) != [()]:
        raise Refused(f"{sx.text(n)!r}: an index not affine in {j} (c * {j} + base, c a nonzero integer)")
    if root in seen and seen[root] != f:
        raise Refused(f"{sx.text(n)!r}: {root} accessed at another index than the one the loop writes "
                      "(a dependence between iterations the scan does not take)")
    seen[root] = f


# -- memory ---------------------------------------------------------------------------------------------------


def _written_roots(node: Node, roots: dict[str, str], arrays: set[str]) -> set[str]:
    """rowpar's :func:`~.rowpar.written_roots`, refusing an atomic or a store intrinsic into a pointer it cannot
    trace to a buffer."""
    out = written_roots(node, roots, arrays)
    unknown = out - set(roots.values())
    if unknown:
        raise Refused(f"cannot tell which buffer {sorted(unknown)[0]!r} points into")
    return out
