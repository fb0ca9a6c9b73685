"""``smem_tile``: a thread-per-output kernel's inner-product loop staged through shared-memory tiles.

Pattern (a naive GEMM, a batched GEMM, a convolution written as a GEMM; a 1-D kernel whose flat index is taken
apart by ``/`` and ``%`` is read through :func:`.unflatten.unflatten` first, so attention scores written one thread
per flat output are one, and where that launch's rows and columns do not separate the operands, each grouping of
the index's digits into a column (holding the innermost) and a row is tried: a direct convolution becomes an
implicit GEMM, its output channel the row, its image, output row and column the column; a perfect nest of loops
(``for ic``, ``for kh``, ``for kw``) is read as one ``k`` over its tuples in the nest's order, each loop's variable
recomputed from ``k`` where the tiles are fetched; a side's loads may read declarations of values of its index alone,
``int ow = col % OW;``, declared again where that side's tile is fetched; a padded convolution's bounds check, ``if
(c) acc += ...;`` as the body's last statement or ``if (c) continue;`` among its declarations, with ``c`` reading one
side's names, ``k`` and uniform names only, masks that side's tile: a skipped term's element is a zero, so it adds a
zero product (not exact for a float sum under ``rtol = atol = 0``: refused there))::

    T row = blockIdx.y * blockDim.y + threadIdx.y;     // y index (either operand order, casts allowed)
    T col = blockIdx.x * blockDim.x + threadIdx.x;     // x index
    ...uniform declarations (int b = blockIdx.z;)...
    if (row < M && col < N) {                          // or: if (row >= M || col >= N) return; ...rest...
        ...declarations (float acc = 0.0f;)...
        for (T k = a; k < b; k++) acc += A[row * lda + k] * B[k * ldb + col];
        ...epilogue (C[row * N + col] = alpha * acc + beta * C[row * N + col];)...
    }

becomes, for a 16 x 16 block of threads each computing ``RM x RN`` outputs of the block's ``16 RM x 16 RN`` tile
(rows ``threadIdx.y + 16 i``, every 16th; or, when ``RM`` is a multiple of 4, groups of 4 adjacent rows 64
apart, ``64 (i / 4) + 4 threadIdx.y + i % 4``, read from shared memory 16 bytes at a time; columns likewise):
the accumulators in registers, initialised per output as the original's declarations do; for each step
of ``TK`` values of ``k``, every thread of the block stores its share of each operand's tile (``TK x 16
RM`` of the row-side loads, ``TK x 16 RN`` of the column-side ones), fetched from global memory into
registers one step ahead (the next step's loads are in flight during this step's arithmetic), into
shared memory; consecutive threads load along ``k`` when ``k``'s stride is 1, else along the row or
column (coalesced either way); elements outside the guard or past the loop's end are zero. What a load reads of
its element's row or column (``int ow = col % OW;``) and, for a nest read as one k, the element's digits of k in
the nest are found once before the loop; each fetch advances the digits by a step's, with carries, so the loop
divides by nothing (an implicit GEMM's runtime divisions per element per step outweighed its multiply-adds). A barrier;
for each ``k`` of the step, ascending, the thread's values of each tile into registers, then every
output's loop body (the last, partial step runs only the ``k`` the loop has, so zero fills are never
used); a barrier. Then the guard, the declarations (the accumulator's now its register) and the
epilogue, per output. Every output sees the same operations in the same order as in the original, so
results are bit-identical. Variants (:data:`CONFIGS`): 1 x 1, 2 x 2, 4 x 4 outputs per thread with
``TK = 16``, 8 x 8 with ``TK = 8`` (16 to 128 outputs a side per block: small grids of small outputs
keep their SMs busy with the first, large ones get the fewest shared-memory reads per multiply-add
from the last), and the rectangles between, 8 x 4 and 4 x 8 with ``TK`` 16 and 8 (``smem_tile_8x4_k16``:
128 x 64 outputs a block, the longer side the operand whose tile is reused more; fewer registers than
8 x 8, so two blocks share an SM). Measured on the H200 (``bench/gemm_tiles.py``,
``bench/results/h200-2026-12-03``), a rectangle was the fastest tile of a naive GEMM, a batched GEMM and
a direct convolution alike, and which one differed among them: the lessons order them.

What is proven on the syntax tree (:mod:`.affine`, :mod:`.reductions`), else refused with the reason
(``why_not``): a 2-D launch whose block has ``z = 1`` and ``policy = "free"``; the two indices from the
usual openings, nothing else before the guard but side-effect-free declarations uniform over a block
(scalar parameters, ``blockIdx.z``); a guard that is a conjunction (``&&``, or ``||`` before a
``return``) of parts each about the row, the column or neither, no memory reads or calls in it, and
a part ``row < M`` / ``col < N`` whose bound is an expression of the spec's scalars (the grid is
recomputed from it); one ``for`` loop in the guarded code, stepping by one from and to bounds uniform
over the block, carrying one recognised accumulation (sum, product, max, min), or two where the body has no
condition (a dual GEMM, GEGLU's ``a += xv * W1[...]; g += xv * W2[...];``: each output gets two register tiles, the
shared operand's tile is staged once, the epilogue reads both), declared before
it, with no branches, nested loops, writes to memory or to other variables declared outside it, and
no use of the row or column outside its loads; each load in the loop ``p[e]`` of a read-only pointer
parameter, or of a pointer into one at a known offset (``const float* Ab = A + b * M * K;``, of the
same element type, never written through), with ``e`` plus that offset (through the constants the code declares) ``s * k + f(row)`` or ``s * k +
f(col)``, ``s`` uniform (the unit or uniform stride) and ``f`` free of ``k``; declarations before the
loop without side effects; an epilogue without ``return``, barriers, shared memory or writes to
variables declared before the guard, accessing each buffer it writes at one index (its output's element); no ``threadIdx``/``blockIdx``/``blockDim``/``gridDim`` but in
the openings (``blockIdx.z`` allowed); no ``__shared__``, barriers, warp collectives, ``asm`` or
``__launch_bounds__``; the shared tiles within 48 KiB; the grid within the hardware's limits at every
spec size; the original's launch covering every row and column its guard allows.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ptxfactory.harness.static_checks import MAX_GRID_DIMS
from ptxfactory.protocol import LaunchConfig
from ptxfactory.protocol.expr import ExprError, evaluate

from . import syntax as sx
from .affine import Poly, add, mul, poly, split
from .base import Unit, access_kind, int_literal
from .syntax import COLLECTIVES
from .reductions import FMA_FUNCS, loop_accumulators
from .rowpar import (PlannedPass, Refused, access_base, array_written, row_constants, loop_head, pointer_offsets, pointer_roots,
                     rows_expression)
from .syntax import Node
from .unflatten import Refused as NotFlat, digit_count, unflatten

THREADS = 16  # threads per block along x and along y
GROUP = 4  # a side of R outputs per thread, R a multiple of 4: groups of 4 adjacent outputs (one 16-byte shared read)
# the tiles each variant gives a thread: (rows, columns, k per step)
CONFIGS = ((1, 1, 16), (2, 2, 16), (4, 4, 16), (8, 4, 16), (4, 8, 16), (8, 4, 8), (4, 8, 8), (8, 8, 8))
SQUARE_TK = {1: 16, 2: 16, 4: 16, 8: 8}  # a square tile's own k step: its name does not say it
SHARED_LIMIT = 48 * 1024  # bytes of static shared memory a block may declare
MAX_OPERANDS = 4  # distinct tiles staged per step
MAX_ACCUMULATORS = 2  # accumulations one loop may carry (a dual GEMM: GEGLU's gate and up projections), each a tile
ELEMENT_BYTES = {"float": 4, "double": 8, "__half": 2, "half": 2, "__nv_bfloat16": 2, "nv_bfloat16": 2,
                 **{t: 4 for t in ("int", "unsigned", "unsigned int", "int32_t", "uint32_t")},
                 **{t: 8 for t in ("long long", "unsigned long long", "int64_t", "uint64_t", "size_t")}}
# element types fetched 16 bytes at a time: (bits of an element, its bits as an unsigned, an unsigned's low bits as it)
VECTOR_TYPES = {"float": (32, "__float_as_uint", "__uint_as_float"),
                "__half": (16, "__half_as_ushort", "__ushort_as_half"), "half": (16, "__half_as_ushort", "__ushort_as_half"),
                "__nv_bfloat16": (16, "__bfloat16_as_ushort", "__ushort_as_bfloat16"),
                "nv_bfloat16": (16, "__bfloat16_as_ushort", "__ushort_as_bfloat16")}
VECTOR_BYTES = 16
BUILTINS = frozenset({"threadIdx", "blockIdx", "blockDim", "gridDim"})
UNIFORM_BUILTINS = frozenset({"blockIdx.z", "gridDim.z"})
PURE_CALLS = sx.VALUE_FUNCS
Y_INDEX: Poly = {("blockDim.y", "blockIdx.y"): 1, ("threadIdx.y",): 1}
X_INDEX: Poly = {("blockDim.x", "blockIdx.x"): 1, ("threadIdx.x",): 1}


@dataclass
class _Index:
    """One of the two output indices: its name, declared type, and the declaration statement holding it."""

    name: str
    ctype: str
    stmt: Node


@dataclass
class _Operand:
    """A staged load: buffer ``ptr`` at ``index`` (a polynomial in the side's index, ``k`` and uniform names)."""

    ptr: str
    index: Poly
    side: str  # "y" (depends on the row index) or "x" (on the column index)
    ctype: str
    k_fastest: bool  # k's stride is 1: consecutive threads load consecutive k
    nodes: list[Node]
    mask: str | None = None  # C condition (of the side's names and k) under which the element is loaded, else zero
    vector: int = 1  # elements a thread fetches with one 16-byte load (along k or along its side; 1: one at a time)
    read_only: bool = False  # the spec's role for the buffer is "in": its 16-byte loads take the read-only path


@dataclass
class _Plan:
    y: _Index
    x: _Index
    uniform_stmts: list[Node]
    cond: Node  # the guard's condition (its value)
    negated: bool  # ``if (cond) return;``: the guard holds when cond does not
    parts: dict[str, list[str]]  # "y", "x", "u": the guard's parts as C conditions (positive)
    pre: list[Node]
    acc_decl: Node  # the accumulator's init_declarator
    acc: str
    acc_type: str
    loop: Node
    k: str
    k_type: str
    k_from: str  # C expression: the first k
    k_end: str  # C expression: one past the last k
    post: list[Node]
    operands: list[_Operand]
    dropped: set[int]  # loop-body declarations of index constants only the staged loads used
    launch: LaunchConfig
    levels: list[tuple[str, str, str, str]] = field(default_factory=list)  # a loop nest read as one k: (var, type, start, trip)
    derived: dict[str, list[Node]] = field(default_factory=dict)  # "y"/"x": declarations of values of that index alone
    pred: Node | None = None  # the loop body's if (c) acc += ...; its condition masks the staged loads of its side
    more: list[tuple[str, Node, str]] = field(default_factory=list)  # the loop's other accumulators (a dual GEMM's)

    @property
    def accs(self) -> list[tuple[str, Node, str, str]]:
        """Every accumulator: ``(name, init_declarator, type, its registers' name)`` (``ptxf_acc``, ``ptxf_acc1``...)."""
        return [(self.acc, self.acc_decl, self.acc_type, "ptxf_acc")] + [
            (n, d, t, f"ptxf_acc{i + 1}") for i, (n, d, t) in enumerate(self.more)]


class SmemTilePass(PlannedPass):
    """A thread per output -> 16 x 16 threads per block, ``rm x rn`` outputs per thread, operands staged in
    shared memory ``tk`` values of ``k`` at a time (see the module docstring)."""

    group = "grid"  # redefines what a thread of the grid does, like rowpar and grid_stride
    exact = True  # every output's operations and their order are the original's

    def __init__(self, rm: int, rn: int, tk: int):
        if not (1 <= rm <= 8 and 1 <= rn <= 8 and 1 <= tk <= 64):
            raise ValueError(f"smem_tile: outputs per thread must be 1..8 per side and k steps 1..64, not {rm} x {rn}, {tk}")
        self.rm, self.rn, self.tk = rm, rn, tk
        self.tm, self.tn = THREADS * rm, THREADS * rn
        self.name = f"smem_tile_{rm}x{rn}" + ("" if rm == rn and SQUARE_TK.get(rm) == tk else f"_k{tk}")
        self._cache: dict = {}  # (text, grid, block, the spec as JSON) -> None (read) or the refusal (a daemon runs many jobs)

    # -- precondition -------------------------------------------------------------------------------------

    def _plan(self, unit: Unit) -> _Plan:
        if unit.body is None or unit.fn is None:
            raise Refused("no kernel body")
        _check_kernel(unit)
        stmts = sx.statements(unit.body)
        guard_at = next((i for i, s in enumerate(stmts) if s.type != "declaration"), None)
        if guard_at is None or stmts[guard_at].type != "if_statement":
            raise Refused("no guard (if) after the index declarations")
        y, x, uniform_stmts, uniform = _openings(unit, stmts[:guard_at])
        cond, negated, rest = _guard(stmts, guard_at)
        parts = _guard_parts(cond, negated, y.name, x.name, uniform)
        loops = [i for i, s in enumerate(rest) if s.type == "for_statement"]
        if len(loops) != 1:
            nested = [n for s in rest if s.type != "for_statement" for n in sx.walk(s) if n.type == "for_statement"]
            where = (f" (the loop at line {nested[0].start_point[0] + 1} is inside the {rest_kind(rest, nested[0])} at "
                     f"line {_top(rest, nested[0]).start_point[0] + 1})") if not loops and nested else ""
            raise Refused(f"{len(loops)} top-level for loops in the guarded code (one inner-product loop wanted){where}")
        pre, loop, post = rest[:loops[0]], rest[loops[0]], rest[loops[0] + 1:]
        if any(sx.contains_type(s, sx.LOOPS) for s in pre):
            raise Refused("a loop before the inner-product loop")
        nest = _nest(loop)
        heads = []
        for level in nest:
            head = loop_head(level)
            if head is None:
                raise Refused("the inner loop is not for (T k = a; k < b; k++)")
            end = _loop_end(level, head[0])
            for node in (head[1], end[0]):
                if not _is_uniform(node, uniform):
                    raise Refused(f"the loop bound {sx.text(node)!r} is not uniform over the block")
                if not _integral(node, unit):
                    raise Refused(f"the loop bound {sx.text(node)!r} is not an integer expression (the tiles count k in integers)")
            ltype = sx.type_text(level.child_by_field_name("initializer").child_by_field_name("type"))
            heads.append((head[0], ltype, head[1], end))
        _check_pre(pre, y.name, x.name)
        shadowed = sorted(set().union(*(sx.declared_names(s) for s in pre)) & uniform)
        if shadowed:  # int K = row % 7 + 1; then k < K: not the scalar K, and not uniform
            raise Refused(f"a declaration before the loop shadows {shadowed[0]}, which the launch's other code reads as uniform")
        derived = _derived(pre, y.name, x.name, uniform, sx.written_names(unit.body))
        body = nest[-1].child_by_field_name("body")
        ks = [h[0] for h in heads]
        for v in ks[:-1]:
            if v in sx.written_names(body):
                raise Refused(f"the loop variable {v} is written in the loop")
        pred = _predicate(body)
        found_accs = _accumulators(unit, body, ks[-1], pre, pred)
        acc, acc_decl, acc_type = found_accs[0]
        for name, decl, _ in found_accs:
            if any(n.type == "identifier" and sx.text(n) == name and not (decl.start_byte <= n.start_byte < decl.end_byte)
                   for s in pre for n in sx.walk(s)):  # float base = acc;: the tile's epilogue gives it the finished sum
                raise Refused(f"the code before the loop reads the accumulator {name}")
        acc_names = {name for name, _, _ in found_accs}
        if pred is not None and acc_type in ("float", "double") and unit.spec.check.rtol == 0 and unit.spec.check.atol == 0:
            raise Refused("the spec asks for exact results, and a skipped term becomes a zero product (a sum of -0.0 "
                          "and +0.0 keeps no sign)")
        consts = _compose({**_merge_constants(pre), **row_constants(loop)}, {y.name, x.name, *ks, *acc_names})
        operands, dropped = _operands(unit, body, ks, y.name, x.name, acc, uniform, consts, derived, pred, acc_names)
        _check_post(post, pre, y.name, x.name)
        _check_outputs(unit, pre + post, _compose({**_merge_constants(pre + post), **row_constants(loop)}, {y.name, x.name, *ks, *acc_names}))
        self._check_shared(operands)
        launch = self._launch(unit, {side: rows_expression(unit, node) for side, node in parts["bound_nodes"].items()})
        trips = [f"({sx.text(e[0])})" + (" + 1" if e[1] else "") + f" - ({sx.text(a)})" for _, _, a, e in heads]
        if len(heads) == 1:  # one loop: its own variable is k
            k, k_type, k_from = ks[0], heads[0][1], sx.text(heads[0][2])
            end, levels = f"({sx.text(heads[0][3][0])})" + (" + 1" if heads[0][3][1] else ""), []
        else:  # a nest: one k over every (outer, ..., inner) tuple, in the nest's order
            k = "ptxf_kv"
            k_type = "long long" if any(t in sx.WIDE_INT_TYPES for _, t, _, _ in heads) else "int"
            k_from, end = "0", " * ".join(f"ptxf_n{i}" for i in range(len(heads)))
            levels = [(v, t, sx.text(a), trip) for (v, t, a, _), trip in zip(heads, trips)]
        inputs = {a.name for a in unit.spec.args if a.is_buffer and a.role == "in"}
        for o in operands:
            o.vector = self._vector_width(o, levels, y.name if o.side == "y" else x.name, derived.get(o.side, []))
            o.read_only = o.ptr in inputs
        return _Plan(y, x, uniform_stmts, cond, negated, parts["text"], pre, acc_decl, acc, acc_type, nest[-1], k, k_type,
                     k_from, end, post, operands, {d.id for d in dropped}, launch, levels, derived, pred, found_accs[1:])

    def _reading(self, unit: Unit) -> None:
        """Whether the pass reads ``unit`` (:class:`Refused` with the reason; remembered per text, launch and spec, since
        the chains ask again and again), as :meth:`_read` reads it: a 1-D kernel whose flat index is taken apart by ``/`` and ``%``
        (a batched GEMM written one thread per flat output) first gets its 2-D/3-D launch (:mod:`.unflatten`); where
        that launch's rows and columns do not separate the operands, every grouping of the index's digits into a
        column (holding the innermost digit) and a row is tried (a convolution: its output channel the row, its image,
        output row and column the column: an implicit GEMM)."""
        key = (unit.text, tuple(map(str, unit.launch.grid)), tuple(map(str, unit.launch.block)), unit.spec.model_dump_json())
        if key not in self._cache:
            if len(self._cache) > 64:
                self._cache.clear()
            try:
                self._read(unit)
                self._cache[key] = None
            except Refused as e:
                self._cache[key] = str(e)
        if self._cache[key] is not None:
            raise Refused(self._cache[key])

    def _read(self, unit: Unit) -> tuple[Unit, _Plan]:
        """``unit`` as read (as written, or through :func:`.unflatten.unflatten`) and its plan, else :class:`Refused`."""
        if len(unit.launch.grid) != 1:
            return unit, self._plan(unit)
        try:
            first = unflatten(unit)
        except NotFlat as e:
            raise Refused(f"a 1-D launch whose index is not a flattened (row, column) one: {e}") from None
        late: Refused | None = None  # a grouping read as a GEMM whose variant then refused it: the reason that counts
        try:
            return first, self._plan(first)
        except Refused as e:
            reason = e
            late = e if getattr(e, "late", False) else None
        n = digit_count(unit)
        for mask in range(1, 2 ** (n - 1)):  # digit 0 (the innermost, the store's coalesced one) stays on x
            rows = [d for d in range(1, n) if mask >> (d - 1) & 1]
            cols = [d for d in range(n) if d not in rows]
            try:
                regrouped = unflatten(unit, [cols, rows])
                return regrouped, self._plan(regrouped)
            except Refused as e:
                late = late or (e if getattr(e, "late", False) else None)
            except NotFlat:
                continue
        if late is not None:  # (mma_tile's tf32 variant on an exact spec: its rtol, not the first grouping's operands)
            raise Refused(f"{late} (with the flat index's digits grouped into rows and columns)")
        raise Refused(f"{reason} (nor with the {n} digits of the flat index grouped into other rows and columns)")

    def _check_shared(self, operands: list[_Operand]) -> None:
        total = sum(self.tk * ((self.tm if o.side == "y" else self.tn) + self._pad(o.side)) * ELEMENT_BYTES[o.ctype]
                    for o in operands)
        if total > SHARED_LIMIT:
            raise Refused(f"{total} bytes of shared tiles (over {SHARED_LIMIT})")

    def _launch(self, unit: Unit, bounds: dict[str, str | None]) -> LaunchConfig:
        spec = unit.spec
        if spec.launch.policy != "free":
            raise Refused('launch.policy = "fixed"')
        grid, block = list(unit.launch.grid), list(unit.launch.block)
        if len(grid) not in (2, 3) or len(block) not in (2, 3) or (len(block) == 3 and str(block[2]).strip() != "1"):
            raise Refused(f"not a 2-D launch (grid {grid}, block {block})")
        rows, cols = bounds.get("y"), bounds.get("x")
        if rows is None or cols is None:
            raise Refused("the guard's row or column bound is not an expression of the spec's scalars")
        new_grid = [f"cdiv({cols}, {self.tn})", f"cdiv({rows}, {self.tm})"] + grid[2:]
        for size in spec.check.sizes + spec.bench.sizes:
            try:
                n, m = int(evaluate(cols, size)), int(evaluate(rows, size))
                old = [int(evaluate(str(g), size)) for g in grid]
                threads = [int(evaluate(str(b), size)) for b in block]
                dims = [int(evaluate(g, size)) for g in new_grid]
            except ExprError as e:
                raise Refused(f"the launch cannot be evaluated at {size}: {e}") from None
            if old[0] * threads[0] < n or old[1] * threads[1] < m:
                raise Refused(f"the original launch covers fewer rows or columns than the guard allows at {size}")
            if any(not 0 < d <= lim for d, lim in zip(dims, MAX_GRID_DIMS)):
                raise Refused(f"grid {new_grid} out of range at {size}")
        return LaunchConfig(grid=new_grid, block=[THREADS, THREADS], shared_mem=unit.launch.shared_mem)

    # -- rewrite ------------------------------------------------------------------------------------------

    def apply(self, unit: Unit) -> Unit:
        unit, p = self._read(unit)  # (the unit read carries this unit's helpers and notes)
        data = unit.data
        ind = "    "
        out = [f"{{   // smem_tile (transform): {self.tm} x {self.tn} outputs per {THREADS} x {THREADS} block, "
               f"{self.rm} x {self.rn} per thread, k in steps of {self.tk}"]
        for s in p.uniform_stmts:
            out.append(ind + sx.text(s))
        for n, o in enumerate(p.operands):
            r = self.rm if o.side == "y" else self.rn
            out.append(f"{ind}__shared__ __align__(16) {o.ctype} ptxf_s{n}[{self.tk}][{self._tile_pitch(o)}];")
            out.append(f"{ind}{o.ctype} ptxf_r{n}[{r}];  // this thread's values of the tile for one k")
            out.append(f"{ind}{self._fetch_registers(n, o)}")
        out += [f"{ind}const int ptxf_tid = threadIdx.y * {THREADS} + threadIdx.x;",
                f"{ind}const long long ptxf_y0 = (long long)blockIdx.y * {self.tm}, ptxf_x0 = (long long)blockIdx.x * {self.tn};",
                *(f"{ind}{t} {reg}[{self.rm}][{self.rn}];" for _, _, t, reg in p.accs)]
        init = self._init_body(p, data)
        out += self._per_output(p, ind, init, indices=any(len(line) and "if (" in line for line in init))
        kb = "ptxf_kb"
        out += self._pipeline(p, ind, [f"{ind}    const int ptxf_kn = ptxf_kend - {kb} < {self.tk} ? (int)(ptxf_kend - {kb}) : {self.tk};"])
        body = self._body(p, data)
        out += [f"{ind}    if (ptxf_kn == {self.tk}) {{", "#pragma unroll",
                f"{ind}        for (int ptxf_kk = 0; ptxf_kk < {self.tk}; ++ptxf_kk) {{"]
        out += [ind * 3 + line for line in body]
        out += [f"{ind}        }}", f"{ind}    }} else {{",
                f"{ind}        for (int ptxf_kk = 0; ptxf_kk < ptxf_kn; ++ptxf_kk) {{"]
        out += [ind * 3 + line for line in body]
        out += [f"{ind}        }}", f"{ind}    }}", f"{ind}    __syncthreads();", f"{ind}}}"]
        out += self._per_output(p, ind, self._epilogue(p, data))
        out.append("}")
        text = sx.apply_edits(data, [(unit.body.start_byte, unit.body.end_byte, "\n".join(out).encode())])
        return unit.with_text(text, launch=p.launch)

    def _pipeline(self, p: _Plan, ind: str, head: list[str] = ()) -> list[str]:
        """The k loop up to a step's arithmetic (shared with :mod:`.mma_tile`): each nest level's trip count, the loop's
        end, a step's digits, the per-element setup and the first step's fetch; then the loop over steps of ``tk``
        (``ptxf_kb``) with ``head`` first, the fetched registers stored into the tiles (:meth:`_store`), a barrier and
        the next step's fetch, in flight during the arithmetic the caller appends (then a barrier and the brace)."""
        kb = "ptxf_kb"
        out = self._pipeline_head(p, ind)
        for n, o in enumerate(p.operands):
            out += self._fetch(p, n, o, f"({p.k_from})", ind)
        out += [f"{ind}for ({p.k_type} {kb} = {p.k_from}; {kb} < ptxf_kend; {kb} += {self.tk}) {{", *head]
        for n, o in enumerate(p.operands):
            out += self._store(n, o, ind + "    ")
        out += [f"{ind}    __syncthreads();", f"{ind}    if (ptxf_kend - {kb} > {self.tk}) {{  // the next step's loads, in flight "
                "during this step's arithmetic"]
        for n, o in enumerate(p.operands):
            out += self._fetch(p, n, o, f"{kb} + {self.tk}", ind + "        ")
        return out + [f"{ind}    }}"]

    def _pipeline_head(self, p: _Plan, ind: str) -> list[str]:
        """What precedes a k loop's first fetch: each nest level's trip count, the loop's end (``ptxf_kend``), a step's
        digits, and each operand's per-element setup (:meth:`_setup`)."""
        out = []
        for i, (v, t, a, trip) in enumerate(p.levels):  # each loop's trip count (none below zero), a divisor at least 1
            out += [f"{ind}const {p.k_type} ptxf_n{i} = max(({p.k_type})0, ({p.k_type})({trip}));  // {v}'s iterations",
                    f"{ind}const {p.k_type} ptxf_q{i} = max(({p.k_type})1, ptxf_n{i});"]
        out += [f"{ind}const {p.k_type} ptxf_kend = {p.k_end};"]
        if len(p.levels) > 1:  # a step's k, as digits of the nest: the fetches advance their elements' digits by it
            out += [f"{ind}const {p.k_type} ptxf_t{i} = {d};  // a step's {v} digit"
                    for i, ((v, _, _, _), d) in enumerate(zip(p.levels, _digits(p, str(self.tk))))]
        for n, o in enumerate(p.operands):
            out += self._setup(p, n, o, ind)
        return out

    def _per_output(self, p: _Plan, ind: str, inner: list[str], indices: bool = True) -> list[str]:
        """``inner`` once per output of the thread's register tile, with the row and column declared (``indices``)."""
        decls = [f"{ind}        const {p.y.ctype} {p.y.name} = ({p.y.ctype})(ptxf_y0 + {self._offset('y', 'ptxf_i')});",
                 f"{ind}        const {p.x.ctype} {p.x.name} = ({p.x.ctype})(ptxf_x0 + {self._offset('x', 'ptxf_j')});"]
        return (["#pragma unroll", f"{ind}for (int ptxf_i = 0; ptxf_i < {self.rm}; ++ptxf_i) {{", "#pragma unroll",
                 f"{ind}    for (int ptxf_j = 0; ptxf_j < {self.rn}; ++ptxf_j) {{"] + (decls if indices else [])
                + [ind * 2 + line for line in inner] + [f"{ind}    }}", f"{ind}}}"])

    def _guard_text(self, p: _Plan) -> str:
        return f"!({sx.text(p.cond)})" if p.negated else sx.text(p.cond)

    def _init_body(self, p: _Plan, data: bytes) -> list[str]:
        inits = [(reg, name, decl.child_by_field_name("value")) for name, decl, _, reg in p.accs]
        if any(init is None for _, _, init in inits):
            raise Refused("the accumulator has no initial value")  # checked in _accumulators
        if all(sx.is_number(init) for _, _, init in inits):  # the same for every output: no declaration needed
            return [f"    {reg}[ptxf_i][ptxf_j] = {sx.text(init)};" for reg, _, init in inits]
        lines = [f"    {reg}[ptxf_i][ptxf_j] = 0;" for reg, _, _ in inits] + [f"    if ({self._guard_text(p)}) {{"]
        lines += ["        " + sx.text(s) for s in p.pre]
        lines += [f"        {reg}[ptxf_i][ptxf_j] = {name};" for reg, name, _ in inits] + ["    }"]
        return lines

    def _epilogue(self, p: _Plan, data: bytes) -> list[str]:
        lines = [f"    if ({self._guard_text(p)}) {{"]
        regs = {decl.child_by_field_name("value").id: f"{reg}[ptxf_i][ptxf_j]".encode() for _, decl, _, reg in p.accs}
        for s in p.pre:  # each accumulator's declaration now takes the output's register
            text = sx.render(s, data, lambda n: regs.get(n.id))
            lines.append("        " + text.decode())
        for s in p.post:
            lines += ["        " + line for line in _dedent(sx.text(s), data, s)]
        lines.append("    }")
        return lines

    def _share(self, o: _Operand) -> tuple[int, int]:
        """``(elements of the operand's tile, fetches each thread makes of it)``: a fetch is ``o.vector`` elements."""
        total = self.tk * (self.tm if o.side == "y" else self.tn)
        return total, -(-total // (THREADS * THREADS * o.vector))

    def _first(self, o: _Operand) -> str:
        """C expression: the tile position (element number) of the first element of the thread's fetch ``ptxf_u``."""
        e = f"ptxf_tid + ptxf_u * {THREADS * THREADS}"
        return e if o.vector == 1 else f"({e}) * {o.vector}"

    def _element(self, o: _Operand) -> str:
        """``ptxf_kk`` and ``ptxf_m`` (k and row or column within the tile) of the thread's element ``ptxf_e``: consecutive
        threads along k when k's stride is 1, else along the row or column (coalesced loads either way)."""
        extent = self.tm if o.side == "y" else self.tn
        if o.k_fastest:
            return f"const int ptxf_kk = ptxf_e % {self.tk}, ptxf_m = ptxf_e / {self.tk};"
        return f"const int ptxf_m = ptxf_e % {extent}, ptxf_kk = ptxf_e / {extent};"

    def _vector_width(self, o: _Operand, levels: list, index: str, derived: list[Node]) -> int:
        """Elements of operand ``o`` a thread fetches with one 16-byte load, else 1: its element type a float, half or
        bf16; no mask; along k when k's stride is 1 (one loop, not a nest whose k carries into another variable), else
        along its side when the side's index enters the load's index alone with stride 1 (``B[k * N + col]``; not
        through a value of it such as ``col % OW``); the tile's extent that way a multiple of the vector. Whether the
        16 bytes are in bounds and aligned is the kernel's question, per fetch (else element by element)."""
        if o.ctype not in VECTOR_TYPES or o.mask is not None:
            return 1
        width = VECTOR_BYTES * 8 // VECTOR_TYPES[o.ctype][0]
        if o.k_fastest:
            return width if len(levels) < 2 and self.tk % width == 0 else 1
        side_names = {index} | set().union(*(sx.declared_names(d) for d in derived))
        on_side = [(mono, c) for mono, c in o.index.items() if set(mono) & side_names]
        extent = self.tm if o.side == "y" else self.tn
        return width if on_side == [((index,), 1)] and extent % width == 0 else 1

    def _tile_at(self, o: _Operand, kk: str = "ptxf_kk", m: str = "ptxf_m") -> str:
        """The subscripts of element (``kk``, ``m``) in operand ``o``'s shared tile: k-major here (a row of the tile
        is one k); :mod:`.mma_tile` overrides it."""
        return f"[{kk}][{m}]"

    def _tile_contiguous(self, o: _Operand) -> str:
        """Which coordinate is contiguous in operand ``o``'s shared tile: ``"m"`` (k-major) or ``"k"``."""
        return "m"

    def _tile_pitch(self, o: _Operand) -> int:
        """Elements between consecutive rows of operand ``o``'s shared tile."""
        return (self.tm if o.side == "y" else self.tn) + self._pad(o.side)

    def _setup(self, p: _Plan, n: int, o: _Operand, ind: str) -> list[str]:
        """Once before the loop, for each element of the thread's share of operand ``n``'s tile: the values of its side's
        index that the loads read (``int ow = col % OW;``: ``ptxf_h{n}_{j}``), which no step changes, and the digits of
        its first k in the nest (``ptxf_d{n}_{i}``), which each fetch advances by a step's (:meth:`_advance`): the
        fetches divide by nothing (three runtime divisions per element per step made an implicit GEMM's index
        arithmetic cost more than its multiply-adds). A value the thread's elements share (their row or column, or
        their k, is the same: :meth:`_slot`) is held once."""
        derived = self._derived_names(p, o)
        if not derived and len(p.levels) < 2:
            return []
        _, each = self._share(o)
        idx = p.y if o.side == "y" else p.x
        origin = "ptxf_y0" if o.side == "y" else "ptxf_x0"
        hm, hk = self._slot(o, "m"), self._slot(o, "k")
        out = [f"{ind}{t} ptxf_h{n}_{j}[{each if hm == 'ptxf_u' else 1}];  // {name} of the elements this thread loads"
               for j, (name, t) in enumerate(derived)]
        if len(p.levels) > 1:
            out += [f"{ind}{p.k_type} ptxf_d{n}_{i}[{each if hk == 'ptxf_u' else 1}];  // the {v} digit of their k"
                    for i, (v, _, _, _) in enumerate(p.levels)]
        body = [f"const int ptxf_e = {self._first(o)};", self._element(o)]
        if derived:
            body.append(f"const {idx.ctype} {idx.name} = ({idx.ctype})({origin} + ptxf_m);")
            body += [sx.text(d) for d in p.derived.get(o.side, [])]
            body += [f"ptxf_h{n}_{j}[{hm}] = {name};" for j, (name, _) in enumerate(derived)]
        if len(p.levels) > 1:
            body.append(f"const {p.k_type} ptxf_kv = ({p.k_from}) + ptxf_kk;")
            body += [f"ptxf_d{n}_{i}[{hk}] = {d};" for i, d in enumerate(_digits(p, "ptxf_kv"))]
        return out + ["#pragma unroll", f"{ind}for (int ptxf_u = 0; ptxf_u < {each}; ++ptxf_u) {{",
                      *(f"{ind}    {line}" for line in body), f"{ind}}}"]

    def _slot(self, o: _Operand, what: str) -> str:
        """How a value of the thread's elements of operand ``o`` that depends on their row or column (``what`` "m") or on
        their k ("k") is indexed: ``ptxf_u`` when the elements differ in it, ``0`` when they share it (element ``e`` is
        ``ptxf_tid + u * 256``: the coordinate taken modulo a divisor of 256 is the same for every ``u``)."""
        extent = self.tm if o.side == "y" else self.tn
        _, each = self._share(o)
        fastest = self.tk if o.k_fastest else extent  # the coordinate that is e % fastest
        shared = each == 1 or (what == ("k" if o.k_fastest else "m") and (THREADS * THREADS * o.vector) % fastest == 0)
        return "0" if shared else "ptxf_u"

    def _derived_names(self, p: _Plan, o: _Operand) -> list[tuple[str, str]]:
        """``(name, type)`` of each value of operand ``o``'s side index declared before the loop (:func:`_derived`)."""
        return [(sx.text(d.child_by_field_name("declarator")), sx.type_text(s.child_by_field_name("type")))
                for s in p.derived.get(o.side, []) for d in s.children_by_field_name("declarator")]

    def _fetch(self, p: _Plan, n: int, o: _Operand, kb: str, ind: str) -> list[str]:
        """The thread's share of operand ``n``'s tile for the step at ``kb``, from global memory into registers
        (``ptxf_p{n}``): zero outside the guard and past the loop's end. The fetches run at consecutive steps (the
        first k, then one step ahead of the loop's): each advances its elements' digits by one step. A vector fetch
        (``o.vector`` elements along k or along the side, one ``uint4``) is one 16-byte load where all its elements are
        in bounds and its address is 16-byte aligned, else element by element (zeros where out of bounds); the
        16-byte load of an ``in`` buffer through ``__ldg`` (the kernel never writes it: :func:`_operands` proves it;
        the spec's buffers do not overlap, as the ``ldg`` hint assumes)."""
        total, each = self._share(o)
        hm, hk = self._slot(o, "m"), self._slot(o, "k")
        step = self._advance(p, n, hk)
        if o.vector == 1:
            inner = self._element_fetch(p, n, o, hm, hk, f"ptxf_p{n}[ptxf_u] = ")
        else:
            inner = self._vector_fetch(p, n, o, hm, hk)
        return [f"{ind}{{", f"{ind}    const {p.k_type} ptxf_kf = {kb};", "#pragma unroll",
                f"{ind}    for (int ptxf_u = 0; ptxf_u < {each}; ++ptxf_u) {{",
                f"{ind}        const int ptxf_e = {self._first(o)};",
                f"{ind}        {self._element(o)}",
                *(f"{ind}        {line}" for line in inner),
                *(f"{ind}        {line}" for line in (step if hk == "ptxf_u" else [])),
                f"{ind}    }}", *(f"{ind}    {line}" for line in (step if hk != "ptxf_u" else [])), f"{ind}}}"]

    def _element_fetch(self, p: _Plan, n: int, o: _Operand, hm: str, hk: str, target: str, dk: str = "", dm: str = "") -> list[str]:
        """One element's load (``target`` then the value): its side's index and held values declared, the loop
        variables at its k, zero where out of bounds; ``dk``/``dm``: its offset from (``ptxf_kk``, ``ptxf_m``)."""
        total = self._share(o)[0]
        idx = p.y if o.side == "y" else p.x
        origin = "ptxf_y0" if o.side == "y" else "ptxf_x0"
        conds = [f"ptxf_e < {total}", f"ptxf_kf + ptxf_kk{dk} < ptxf_kend"] + [f"({c})" for c in p.parts[o.side] + p.parts["u"]]
        if o.mask is not None:  # the loop body's condition: a skipped term's element is a zero
            conds.append(f"({o.mask})")
        held = [f"{t} {name} = ptxf_h{n}_{j}[{hm}];" for j, (name, t) in enumerate(self._derived_names(p, o))]
        return [f"const {idx.ctype} {idx.name} = ({idx.ctype})({origin} + ptxf_m{dm});", *held,
                *self._k_lines(p, n, hk, f"ptxf_kk{dk}"),
                f"{target}{' && '.join(conds)} ? {o.ptr}[{_render(o.index)}] : {o.ctype}();"]

    def _vector_fetch(self, p: _Plan, n: int, o: _Operand, hm: str, hk: str, fast=None, slow=None) -> list[str]:
        """Fetch ``ptxf_u`` of operand ``n`` as one ``uint4`` (see :meth:`_fetch`): ``fast(pointer)`` is the statement
        for 16 aligned bytes in bounds at the global ``pointer``, ``slow(value)`` the one for the packed elements
        (default: both into the register ``ptxf_p{n}[ptxf_u]``)."""
        if fast is None:
            nc = o.read_only
            fast = lambda a: f"ptxf_p{n}[ptxf_u] = {'__ldg(' if nc else '*'}reinterpret_cast<const uint4*>({a}){')' if nc else ''};"  # noqa: E731
        if slow is None:
            slow = lambda v: f"ptxf_p{n}[ptxf_u] = {v};"  # noqa: E731
        v = o.vector
        bits, as_bits, _ = VECTOR_TYPES[o.ctype]
        idx = p.y if o.side == "y" else p.x
        origin = "ptxf_y0" if o.side == "y" else "ptxf_x0"
        total = self._share(o)[0]
        along_k = o.k_fastest
        last = f" + {v - 1}" if along_k else ""
        whole = [f"ptxf_e < {total}", f"ptxf_kf + ptxf_kk{last} < ptxf_kend"] + [f"({c})" for c in p.parts["u"]]
        side = [f"({c})" for c in p.parts[o.side]]
        held = [f"{t} {name} = ptxf_h{n}_{j}[{hm}];" for j, (name, t) in enumerate(self._derived_names(p, o))]
        out = [f"bool ptxf_ok = {' && '.join(whole)};", f"const {o.ctype}* ptxf_a;",
               "{", f"    const {idx.ctype} {idx.name} = ({idx.ctype})({origin} + ptxf_m);", *("    " + h for h in held),
               *("    " + line for line in self._k_lines(p, n, hk)),
               f"    ptxf_a = &{o.ptr}[{_render(o.index)}];"]
        if along_k and side:  # the side's index is the same for the vector's elements
            out.append(f"    ptxf_ok = ptxf_ok && {' && '.join(side)};")
        out.append("}")
        if not along_k and side:  # each element's own index within the side's bounds
            out += ["#pragma unroll", f"for (int ptxf_i = 0; ptxf_i < {v}; ++ptxf_i) {{",
                    f"    const {idx.ctype} {idx.name} = ({idx.ctype})({origin} + ptxf_m + ptxf_i);",
                    f"    ptxf_ok = ptxf_ok && {' && '.join(side)};", "}"]
        words = [(f"{as_bits}(ptxf_f[{w}])" if bits == 32 else
                  f"(unsigned){as_bits}(ptxf_f[{2 * w}]) | ((unsigned){as_bits}(ptxf_f[{2 * w + 1}]) << 16)") for w in range(4)]
        element = self._element_fetch(p, n, o, hm, hk, "ptxf_f[ptxf_i] = ", *((" + ptxf_i", "") if along_k else ("", " + ptxf_i")))
        out += [f"if (ptxf_ok && (reinterpret_cast<unsigned long long>(ptxf_a) & {VECTOR_BYTES - 1}) == 0) {{",
                f"    {fast('ptxf_a')}",
                "} else {  // at an edge or unaligned: element by element",
                f"    {o.ctype} ptxf_f[{v}];", "#pragma unroll", f"    for (int ptxf_i = 0; ptxf_i < {v}; ++ptxf_i) {{",
                *(f"        {line}" for line in element), "    }",
                f"    {slow('make_uint4(' + ', '.join(words) + ')')}", "}"]
        return out

    def _k_lines(self, p: _Plan, n: int, slot: str, kk: str = "ptxf_kk") -> list[str]:
        """The loop variables at the element's k (``ptxf_kf + kk``): k itself, or each variable of a nest from
        the element's digits of operand ``n`` (:meth:`_setup`; ``slot``: their index)."""
        if len(p.levels) < 2:
            if not p.levels:
                return [f"const {p.k_type} {p.k} = ptxf_kf + {kk};"]
            v, t, a, _ = p.levels[0]
            return [f"const {t} {v} = ({t})(({a}) + ptxf_kf + {kk});"]
        return [f"const {t} {v} = ({t})(({a}) + ptxf_d{n}_{i}[{slot}]);" for i, (v, t, a, _) in enumerate(p.levels)]

    def _advance(self, p: _Plan, n: int, slot: str) -> list[str]:
        """Digits ``slot`` of operand ``n`` plus a step's (``ptxf_t{i}``), innermost first, each carry taken by one
        subtraction (a digit and a step's digit are each under the level's count)."""
        last = len(p.levels) - 1
        if last < 1:
            return []
        lines = []
        for i in range(last, 0, -1):
            d = f"ptxf_d{n}_{i}[{slot}]"
            lines += [f"{d} += ptxf_t{i};", f"if ({d} >= ptxf_q{i}) {{ {d} -= ptxf_q{i}; ++ptxf_d{n}_{i - 1}[{slot}]; }}"]
        return lines + [f"ptxf_d{n}_0[{slot}] += ptxf_t0;"]

    def _store(self, n: int, o: _Operand, ind: str) -> list[str]:
        """Operand ``n``'s registers (``ptxf_p{n}``) into its shared tile: a vector fetch as one 16-byte store where the
        tile is contiguous along the vector and its rows are 16-byte multiples, else element by element."""
        total, each = self._share(o)
        head = ["#pragma unroll", f"{ind}for (int ptxf_u = 0; ptxf_u < {each}; ++ptxf_u) {{",
                f"{ind}    const int ptxf_e = {self._first(o)};", f"{ind}    {self._element(o)}"]
        if o.vector == 1:
            return head + [f"{ind}    if (ptxf_e < {total}) ptxf_s{n}{self._tile_at(o)} = ptxf_p{n}[ptxf_u];", f"{ind}}}"]
        along = "k" if o.k_fastest else "m"
        if along == self._tile_contiguous(o) and self._tile_pitch(o) * ELEMENT_BYTES[o.ctype] % VECTOR_BYTES == 0:
            return head + [f"{ind}    if (ptxf_e < {total}) *reinterpret_cast<uint4*>(&ptxf_s{n}{self._tile_at(o)}) = ptxf_p{n}[ptxf_u];",
                           f"{ind}}}"]
        bits, _, from_bits = VECTOR_TYPES[o.ctype]
        lines = [f"{ind}    if (ptxf_e < {total}) {{", f"{ind}        const uint4 ptxf_w = ptxf_p{n}[ptxf_u];"]
        for i in range(o.vector):
            word = "xyzw"[i * bits // 32]
            value = f"{from_bits}(ptxf_w.{word})" if bits == 32 else \
                f"{from_bits}((unsigned short)(ptxf_w.{word}{' >> 16' if i % 2 else ''}))"
            at = self._tile_at(o, f"ptxf_kk + {i}", "ptxf_m") if along == "k" else self._tile_at(o, "ptxf_kk", f"ptxf_m + {i}")
            lines.append(f"{ind}        ptxf_s{n}{at} = {value};")
        return head + lines + [f"{ind}    }}", f"{ind}}}"]

    def _fetch_registers(self, n: int, o: _Operand) -> str:
        """The declaration of the registers holding the thread's share of operand ``n``'s next tile."""
        kind = "uint4" if o.vector > 1 else o.ctype
        return f"{kind} ptxf_p{n}[{self._share(o)[1]}];  // this thread's share of the next tile"

    def _grouped(self, side: str) -> bool:
        return (self.rm if side == "y" else self.rn) % GROUP == 0

    def _pad(self, side: str) -> int:
        """Elements after each k's row of a tile: 4 keeps the rows 16-byte aligned (grouped), else 1 (fewer bank conflicts)."""
        return GROUP if self._grouped(side) else 1

    def _offset(self, side: str, q: str) -> str:
        """Where this thread's output ``q`` (0..R-1) of a side sits in the block's tile: every 16th (strided), or
        groups of 4 adjacent ones, 64 apart (grouped)."""
        t = "threadIdx.y" if side == "y" else "threadIdx.x"
        if self._grouped(side):
            return f"({q} / {GROUP}) * {GROUP * THREADS} + {t} * {GROUP} + {q} % {GROUP}"
        return f"{t} + {q} * {THREADS}"

    def _registers(self, n: int, o: _Operand) -> list[str]:
        """Operand ``n``'s values for this thread's outputs at one k, from the tile into registers."""
        r = self.rm if o.side == "y" else self.rn
        t = "threadIdx.y" if o.side == "y" else "threadIdx.x"
        if self._grouped(o.side) and o.ctype == "float":
            return ["#pragma unroll", f"for (int ptxf_g = 0; ptxf_g < {r // GROUP}; ++ptxf_g) {{",
                    f"    const float4 ptxf_v = *reinterpret_cast<const float4*>(&ptxf_s{n}[ptxf_kk][ptxf_g * {GROUP * THREADS} + {t} * {GROUP}]);",
                    *(f"    ptxf_r{n}[ptxf_g * {GROUP} + {c}] = ptxf_v.{f};" for c, f in enumerate("xyzw")), "}"]
        return ["#pragma unroll", f"for (int ptxf_q = 0; ptxf_q < {r}; ++ptxf_q) ptxf_r{n}[ptxf_q] = ptxf_s{n}[ptxf_kk][{self._offset(o.side, 'ptxf_q')}];"]

    def _body(self, p: _Plan, data: bytes) -> list[str]:
        """One k for every output: the operands' values into registers, then the loop body once per output, its loads
        read from those registers."""
        reads = {}
        regs: list[str] = []
        for n, o in enumerate(p.operands):
            regs += self._registers(n, o)
            for node in o.nodes:
                reads[node.id] = f"ptxf_r{n}[{'ptxf_i' if o.side == 'y' else 'ptxf_j'}]".encode()
        k_text = f"(({p.k_type})(ptxf_kb + ptxf_kk))".encode()
        regs_of = {name: f"{reg}[ptxf_i][ptxf_j]".encode() for name, _, _, reg in p.accs}

        def replace(node: Node) -> bytes | None:
            if p.pred is not None and node.id == p.pred.id:  # if (c) acc += a * b;: the masked elements make it a zero
                return b"" if _skips(p.pred) else sx.render(p.pred.child_by_field_name("consequence"), data, replace)
            if node.id in p.dropped:
                return b""
            if node.id in reads:
                return reads[node.id]
            if node.type == "identifier" and sx.text(node) in regs_of:
                return regs_of[sx.text(node)]
            if sx.is_ident(node, p.k):
                return k_text
            return None

        body = p.loop.child_by_field_name("body")
        text = sx.render(body, data, replace).decode()
        if body.type != "compound_statement":
            text = "{ " + text + " }"
        lines = text.split("\n")
        return regs + (["#pragma unroll", f"for (int ptxf_i = 0; ptxf_i < {self.rm}; ++ptxf_i) {{", "#pragma unroll",
                 f"    for (int ptxf_j = 0; ptxf_j < {self.rn}; ++ptxf_j) {lines[0]}"]
                + ["    " + line for line in _dedent_lines(lines[1:])] + ["}"])


# -- the pieces of the precondition ------------------------------------------------------------------------


def _top(rest: list[Node], node: Node) -> Node:
    """The statement of ``rest`` that holds ``node``."""
    return next(s for s in rest if s.start_byte <= node.start_byte < s.end_byte)


def rest_kind(rest: list[Node], node: Node) -> str:
    """What kind of statement of ``rest`` holds ``node`` (``if/else``, ``while loop``, ...), for a refusal."""
    t = _top(rest, node).type
    return {"if_statement": "if/else", "while_statement": "while loop", "do_statement": "do loop",
            "compound_statement": "block", "switch_statement": "switch"}.get(t, t.replace("_", " "))


def _check_kernel(unit: Unit) -> None:
    """What no part of the kernel may hold (shared memory, barriers, collectives, asm, launch bounds)."""
    if "__launch_bounds__" in unit.text:
        raise Refused("__launch_bounds__ fixed for the original block")
    for n in sx.walk(unit.body):
        if n.type in ("__shared__",) or (n.type == "type_qualifier" and sx.text(n) == "__shared__") or sx.text(n) == "__shared__":
            raise Refused("the kernel already uses shared memory")
        if n.type in ("gnu_asm_expression", "asm_statement"):
            raise Refused("inline asm")
        if n.type == "goto_statement":
            raise Refused("goto")
        if sx.call_name(n) in COLLECTIVES:
            raise Refused(f"{sx.call_name(n)} in the kernel")


def _builtin(node: Node) -> str | None:
    """``threadIdx.x`` and the like for a builtin's field expression, else None."""
    if node.type == "field_expression":
        arg = node.child_by_field_name("argument")
        if sx.is_ident(arg) and sx.text(arg) in BUILTINS:
            return f"{sx.text(arg)}.{sx.text(node.child_by_field_name('field'))}"
    return None


def _openings(unit: Unit, decls: list[Node]) -> tuple[_Index, _Index, list[Node], set[str]]:
    """The y and x output indices, the other (uniform) declarations before the guard, and the uniform names."""
    scalars = {a.name for a in unit.spec.args if a.role == "scalar"}
    written = sx.written_names(unit.body)
    uniform = {s for s in scalars if s not in written} | {p for p in unit.pointers if p not in written}
    found: dict[str, _Index] = {}
    others = []
    # blockDim, or the launch's literal block size written in its place (blockIdx.y * 16 + threadIdx.y)
    y_forms, x_forms = [Y_INDEX], [X_INDEX]
    for forms, d, b in ((x_forms, "x", unit.launch.block[0]), (y_forms, "y", unit.launch.block[1] if len(unit.launch.block) > 1 else None)):
        if int_literal(b) is not None:
            forms.append({(f"blockIdx.{d}",): int_literal(b), (f"threadIdx.{d}",): 1})
    for stmt in decls:
        ctype = sx.type_text(stmt.child_by_field_name("type"))
        kinds = []
        for d in stmt.children_by_field_name("declarator"):
            name = sx.text(sx.innermost_identifier(d))
            value = d.child_by_field_name("value") if d.type == "init_declarator" else None
            p = poly(value) if value is not None and sx.is_ident(d.child_by_field_name("declarator")) else None
            kind = "y" if p in y_forms else "x" if p in x_forms else None
            if kind is not None:
                if kind in found or ctype not in sx.INT_TYPES or name in written:
                    raise Refused(f"the {kind} index {name!r}: declared twice, not an integer, or written")
                found[kind] = _Index(name, ctype, stmt)
            elif value is None or not _is_uniform(value, uniform) or name in written:
                if value is not None and poly(value) == {("blockIdx.y",): 1}:
                    raise Refused(f"{name!r} = {' '.join(sx.text(value).split())}: an output coordinate a block on y "
                                  "(smem_tile tiles rows read as blockIdx.y * blockDim.y + threadIdx.y, not one a block)")
                if value is not None and all(b in sx.text(value) for b in ("blockIdx.z", "threadIdx.z")):
                    raise Refused(f"{name!r} = {' '.join(sx.text(value).split())}: an output index on z (smem_tile tiles the "
                                  "outputs of x and y, a plane a launch)")
                raise Refused(f"the declaration of {name!r} before the guard is neither an output index (blockIdx * blockDim "
                              "+ threadIdx, the launch's block) nor uniform over the block")
            else:
                uniform.add(name)
            kinds.append(kind)
        if any(kinds) and not all(kinds):
            raise Refused("an index declared with other names in one statement")
        if not any(kinds):
            others.append(stmt)
    if set(found) != {"y", "x"}:
        raise Refused("not a 2-D thread-per-output kernel (blockIdx.y * blockDim.y + threadIdx.y and the same in x)")
    for n in sx.walk(unit.body):
        b = _builtin(n)
        if b is not None and b not in UNIFORM_BUILTINS and not any(s.start_byte <= n.start_byte < s.end_byte
                                                                   for s in (found["y"].stmt, found["x"].stmt)):
            raise Refused(f"{b} used beyond the index declarations")
    return found["y"], found["x"], others, uniform


def _is_uniform(node: Node | None, uniform: set[str]) -> bool:
    """``node`` is the same for every thread of a block: uniform names, literals, arithmetic, ``blockIdx.z``."""
    if node is None:
        return False
    for n in sx.walk(node):
        if n.type in ("call_expression", "subscript_expression", "assignment_expression", "update_expression",
                      "pointer_expression", "conditional_expression"):
            return False
        if n.type == "field_expression" and _builtin(n) not in UNIFORM_BUILTINS:
            return False
        if n.type == "identifier" and sx.text(n) not in uniform and not (n.parent is not None and n.parent.type == "field_expression"):
            return False
    return True


def _guard(stmts: list[Node], at: int) -> tuple[Node, bool, list[Node]]:
    """``(condition, negated, guarded statements)`` for ``if (c) return; ...`` or a final ``if (c) {...}``."""
    g = stmts[at]
    if g.child_by_field_name("alternative") is not None:
        raise Refused("the guard has an else branch")
    cond = sx.unparen(g.child_by_field_name("condition").child_by_field_name("value"))
    cons = g.child_by_field_name("consequence")
    inner = sx.statements(cons) if cons.type == "compound_statement" else [cons]
    if len(inner) == 1 and inner[0].type == "return_statement" and inner[0].named_child_count == 0:
        rest = stmts[at + 1:]
        negated = True
    elif at == len(stmts) - 1:
        rest, negated = inner, False
    else:
        raise Refused("code after the guarded block")
    if any(n.type == "return_statement" for s in rest for n in sx.walk(s)):
        raise Refused("a return in the guarded code (it would end the thread's other outputs)")
    return cond, negated, rest


def _guard_parts(cond: Node, negated: bool, y: str, x: str, uniform: set[str]) -> dict:
    """The guard's parts by what they are about (``"y"``, ``"x"``, ``"u"``), as positive C conditions, and the row and
    column bounds (the node of ``y < M``'s ``M``) for the grid. Raises :class:`Refused` for a part about both."""
    parts = sx.operands(cond, "||" if negated else "&&")
    text: dict[str, list[str]] = {"y": [], "x": [], "u": []}
    bounds: dict[str, Node] = {}
    for part in parts:
        if any(n.type in ("call_expression", "subscript_expression", "pointer_expression", "assignment_expression",
                          "update_expression") for n in sx.walk(part)):
            raise Refused(f"the guard part {sx.text(part)!r} reads memory or calls a function")
        names = sx.identifiers(part)
        if y in names and x in names:
            raise Refused(f"the guard part {sx.text(part)!r} is about both the row and the column")
        side = "y" if y in names else "x" if x in names else "u"
        if side == "u" and not _is_uniform(part, uniform):
            raise Refused(f"the guard part {sx.text(part)!r} is not uniform over the block")
        text[side].append(f"!({sx.text(part)})" if negated else sx.text(part))
        if side != "u" and side not in bounds:
            b = _upper_bound(part, y if side == "y" else x, negated)
            if b is not None:
                bounds[side] = b
    return {"text": text, "bound_nodes": bounds}


def _upper_bound(part: Node, name: str, negated: bool) -> Node | None:
    """``M`` of ``name < M`` (``M > name``; negated: ``name >= M``, ``M <= name``), else None."""
    if part.type != "binary_expression":
        return None
    op, a, b = sx.operator(part), sx.uncast(part.child_by_field_name("left")), sx.uncast(part.child_by_field_name("right"))
    want = (">=", "<=") if negated else ("<", ">")
    if op == want[0] and sx.is_ident(a, name):
        return part.child_by_field_name("right")
    if op == want[1] and sx.is_ident(b, name):
        return part.child_by_field_name("left")
    return None


def _loop_end(loop: Node, k: str) -> tuple[Node, bool]:
    """``(b, inclusive)`` for the loop condition ``k < b`` (``k <= b``: inclusive; ``b > k``, ``b >= k``)."""
    c = sx.unparen(loop.child_by_field_name("condition"))
    op = sx.operator(c)
    bound = c.child_by_field_name("right" if op in ("<", "<=") else "left")
    return bound, op in ("<=", ">=")


def _integral(node: Node, unit: Unit) -> bool:
    """No float literal, float scalar argument or cast to a float type in ``node`` (a loop bound ``K * 0.5f`` compares
    k with a real number: its count is not the integer the tiles step to)."""
    floats = {a.name for a in unit.spec.args if a.role == "scalar" and a.dtype.is_float}
    for n in sx.walk(node):
        if n.type == "number_literal" and not sx.text(n).lower().startswith("0x") and any(c in sx.text(n).lower() for c in ".ef"):
            return False
        if n.type == "identifier" and sx.text(n) in floats:
            return False
        if n.type == "cast_expression" and sx.type_text(n.child_by_field_name("type")) in ("float", "double", "half", "__half"):
            return False
    return True


def _check_pre(pre: list[Node], y: str, x: str) -> None:
    for s in pre:
        if s.type != "declaration":
            raise Refused(f"a statement before the loop that is not a declaration: {sx.text(s)!r}")
        for n in sx.walk(s):
            if n.type in ("assignment_expression", "update_expression") or (
                    n.type == "call_expression" and sx.call_name(n) not in PURE_CALLS):
                raise Refused(f"a declaration before the loop with a side effect: {sx.text(s)!r}")


def _predicate(body: Node) -> Node | None:
    """A padded convolution's bounds check in the loop body: its last statement ``if (c) acc += ...;`` (no else, one
    statement) after declarations only, or a statement ``if (c) continue;`` among declarations before the rest; else
    None. (:func:`_skips` tells the two apart.)"""
    stmts = sx.statements(body) if body.type == "compound_statement" else [body]
    ifs = [s for s in stmts if s.type == "if_statement"]
    if len(ifs) != 1 or ifs[0].child_by_field_name("alternative") is not None:
        return None
    cons = ifs[0].child_by_field_name("consequence")
    inner = sx.statements(cons) if cons.type == "compound_statement" else [cons]
    if len(inner) != 1:
        return None
    if inner[0].type == "continue_statement":
        at = stmts.index(ifs[0])
        return ifs[0] if all(s.type == "declaration" for s in stmts[:at]) else None
    if stmts[-1] is ifs[0] and inner[0].type == "expression_statement" and all(s.type == "declaration" for s in stmts[:-1]):
        return ifs[0]
    return None


def _skips(pred: Node) -> bool:
    """Whether ``pred`` (:func:`_predicate`) is the ``if (c) continue;`` form: its condition says when to skip."""
    cons = pred.child_by_field_name("consequence")
    inner = sx.statements(cons) if cons.type == "compound_statement" else [cons]
    return inner[0].type == "continue_statement"


def _accumulators(unit: Unit, body: Node, k: str, pre: list[Node], pred: Node | None = None) -> list[tuple[str, Node, str]]:
    """The loop's accumulators (one, or up to :data:`MAX_ACCUMULATORS` under no condition: a dual GEMM's ``a += x *
    W1; g += x * W2;`` sharing x's tile), each ``(name, its init_declarator among pre, its type)``. ``pred``: the
    body's ``if`` (:func:`_predicate`), whose condition is read by :func:`_operands`, not here."""
    declared = sx.declared_names(body)
    if k in sx.written_names(body):
        raise Refused(f"the loop variable {k} is written in the loop")
    outside = set()  # names declared in the kernel outside the loop's body (parameters, the code before the loop)
    for n in sx.walk(unit.fn):
        if n.type in ("declaration", "parameter_declaration") and not (body.start_byte <= n.start_byte < body.end_byte):
            for d in n.children_by_field_name("declarator"):
                ident = sx.innermost_identifier(d)
                if ident is not None:
                    outside.add(sx.text(ident))
    hidden = sorted(declared & outside)
    if hidden:  # { float t = 1.0f; ... } beside t += xv: the carried t would be read as a local
        raise Refused(f"the loop body declares {hidden[0]} again, hiding the one declared outside it")
    cond = pred.child_by_field_name("condition") if pred is not None else None
    if pred is not None and _skips(pred):
        cond = pred  # if (c) continue;: the whole statement (the mask) is read by _operands
    for n in sx.walk(body):
        if pred is not None and (n.id == pred.id or cond.start_byte <= n.start_byte < cond.end_byte):
            continue
        if n.type in sx.LOOPS or n.type in ("if_statement", "conditional_expression", "switch_statement", "break_statement",
                                            "continue_statement", "return_statement"):
            raise Refused(f"a branch or loop inside the inner-product loop ({n.type})")
        if n.type == "binary_expression" and sx.operator(n) in ("&&", "||"):
            raise Refused("a short-circuit condition inside the inner-product loop")
        target = n.child_by_field_name("left") if n.type == "assignment_expression" else (
            n.child_by_field_name("argument") if n.type == "update_expression" else None)
        if target is not None and not sx.is_ident(sx.unparen(target)):
            raise Refused(f"the loop writes memory ({sx.text(n)!r})")
    carried = sx.written_names(body) - declared - {k}
    accs = loop_accumulators(body, carried, k) if carried else None
    if not accs or set().union(*({a.name} | set(getattr(a, "names", ()) or ()) for a in accs.values())) != carried:
        raise Refused(f"the loop carries {sorted(carried) or 'nothing'}, not recognised accumulations alone")
    if len(accs) > 1 and pred is not None:
        raise Refused(f"the loop carries {sorted(carried)}: several accumulations under the loop body's condition")
    if len(accs) > MAX_ACCUMULATORS:
        raise Refused(f"the loop carries {len(accs)} accumulations (at most {MAX_ACCUMULATORS}: each a register tile)")
    out = []
    for acc in sorted(accs.values(), key=lambda a: _declared_at(pre, a.name)):
        if acc.kind == "arg":
            raise Refused("an arg max/min accumulation (two carried variables)")
        if pred is not None and acc.kind != "sum":
            raise Refused(f"a {acc.kind} under the loop body's condition (a masked element is a zero only in a sum of products)")
        for s in pre:
            for d in s.children_by_field_name("declarator"):
                if sx.text(sx.innermost_identifier(d)) == acc.name:
                    if d.type != "init_declarator" or not sx.is_ident(d.child_by_field_name("declarator")) \
                            or d.child_by_field_name("value").type in ("argument_list", "initializer_list"):
                        raise Refused(f"the accumulator {acc.name} is not declared as T {acc.name} = value;")
                    ctype = sx.type_text(s.child_by_field_name("type"))
                    if "auto" in ctype.split() or "decltype" in ctype:
                        raise Refused(f"the accumulator {acc.name} is declared {ctype!r}: its registers need a written type")
                    out.append((acc.name, d, ctype))
                    break
            else:
                continue
            break
        else:
            raise Refused(f"the accumulator {acc.name} is not declared in the guarded code before the loop")
    return out


def _declared_at(pre: list[Node], name: str) -> int:
    """Where ``name`` is declared among ``pre`` (its byte), or past the end: the accumulators in declaration order."""
    for s in pre:
        for d in s.children_by_field_name("declarator"):
            if sx.text(sx.innermost_identifier(d)) == name:
                return d.start_byte
    return 1 << 60


def _merge_constants(stmts: list[Node]) -> dict[str, Poly]:
    out: dict[str, Poly] = {}
    for s in stmts:
        for name, p in row_constants(s).items():
            out.setdefault(name, p)
    return out


def _compose(consts: dict[str, Poly], keep: set[str]) -> dict[str, Poly]:
    """``consts`` with every name that is itself a constant substituted (to a fixed point), ``keep`` never substituted."""
    consts = {n: p for n, p in consts.items() if n not in keep}
    for _ in range(8):
        changed = False
        for n in consts:
            q = _substitute(consts[n], consts)
            if q != consts[n]:
                consts[n], changed = q, True
        if not changed:
            return consts
    return {}


def _substitute(p: Poly, consts: dict[str, Poly]) -> Poly:
    out: Poly = {}
    for mono, c in p.items():
        term: Poly = {(): c}
        for name in mono:
            term = mul(term, consts.get(name, {(name,): 1}))
        out = add(out, term)
    return out


def _nest(loop: Node) -> list[Node]:
    """``loop`` and the loops perfectly nested in it (each the only statement of the one above), outermost first: a
    convolution's (channel, kernel row, kernel column) read as one k."""
    out = [loop]
    while True:
        body = out[-1].child_by_field_name("body")
        inner = sx.statements(body) if body is not None and body.type == "compound_statement" else [body]
        if len(inner) != 1 or inner[0] is None or inner[0].type != "for_statement":
            return out
        out.append(inner[0])


def _derived(pre: list[Node], y: str, x: str, uniform: set[str], written: set[str]) -> dict[str, list[Node]]:
    """The declarations before the loop of values of one output index alone (``int ow = col % OW;``, through earlier
    such values and uniform names; no memory, call or write; never written after), by side: a staged load may read
    them (the fetch declares them again for the tile's element), each only on its side."""
    out: dict[str, list[Node]] = {"y": [], "x": []}
    names = {"y": {y}, "x": {x}}
    for s in pre:
        ds = s.children_by_field_name("declarator") if s.type == "declaration" else []
        if not ds or any(d.type != "init_declarator" or not sx.is_ident(d.child_by_field_name("declarator")) for d in ds):
            continue
        declared = {sx.text(d.child_by_field_name("declarator")) for d in ds}
        if declared & written or sx.contains_type(s, ("call_expression", "subscript_expression", "pointer_expression",
                                                      "assignment_expression", "update_expression")):
            continue
        ids = set().union(*(sx.identifiers(d.child_by_field_name("value")) for d in ds))
        for side in ("y", "x"):
            if ids & names[side] and ids <= uniform | names[side]:
                out[side].append(s)
                names[side] |= declared
                break
    return out


def _mask(unit: Unit, pred: Node, body: Node, acc: str, ks: list[str], uniform: set[str], consts: dict[str, Poly],
          side_names: dict[str, set[str]], found: dict) -> None:
    """Each operand's mask from the loop body's condition (:func:`_predicate`): its conjuncts (``if (c)``; the negated
    disjuncts of ``if (c) continue;``) each read one side's names (that side's loads are masked by it) or none (k and
    uniform names only: every load is masked by it; a condition may guard another side's load, ``k >= 1`` before
    ``A[row * K + k - 1]``); a conjunct reading both sides is refused. The sum's term must be a product holding a load
    of every side masked, so a masked term is a zero product."""
    cond = pred.child_by_field_name("condition")
    if sx.contains_type(cond, ("call_expression", "subscript_expression", "pointer_expression", "assignment_expression",
                               "update_expression", "conditional_expression")):
        raise Refused(f"the condition {sx.text(cond)!r} reads memory, calls or writes")
    skips = _skips(pred)
    parts = sx.operands(cond.child_by_field_name("value") or cond, "||" if skips else "&&")
    subst = {v: f"({_render(p)})" for v, p in consts.items()}  # the body's index constants, as their values
    allowed = uniform | set(ks) | side_names["y"] | side_names["x"]
    masks: dict[str, list[str]] = {"y": [], "x": []}
    for part in parts:
        names = set()
        for n in sx.walk(part):
            if n.type == "identifier":
                v = sx.text(n)
                names |= {w for mono in consts[v] for w in mono} if v in consts else {v}
        if not names <= allowed:
            raise Refused(f"the condition {sx.text(cond)!r} reads {sorted(names - allowed)}")
        sides = [side for side in ("y", "x") if names & side_names[side]]
        if len(sides) > 1:
            raise Refused(f"the condition's part {sx.text(part)!r} reads both the row and the column")
        text = sx.render(part, unit.data, lambda n: subst[sx.text(n)].encode()
                         if n.type == "identifier" and sx.text(n) in subst else None).decode()
        for side in sides or ["y", "x"]:
            masks[side].append(f"!({text})" if skips else f"({text})")
    term, products = _sum_products(body, acc)
    factors = [f for t in products for f in sx.operands(t, "*", casts=True)]
    loads = {node.id: o.side for o in found.values() for node in o.nodes}
    have = {loads[n.id] for n in map(_converted_load, factors) if n is not None and n.id in loads}
    for side in ("y", "x"):
        if masks[side] and side not in have:
            raise Refused(f"the term {sx.text(term)!r} under the condition is not a product with a load of the "
                          f"{'row' if side == 'y' else 'column'}'s side (a masked element would not make it a zero)")
    for o in found.values():
        if masks[o.side]:
            o.mask = " && ".join(masks[o.side])


CONVERSION_CALLS = frozenset({"__half2float", "__bfloat162float"})  # a 16-bit load to float: zero stays zero


def _converted_load(node: Node | None) -> Node | None:
    """``node`` without parentheses, casts and conversion calls to float (each maps a zero to a zero): a masked
    element's zero fill still makes the product zero through them."""
    while node is not None:
        node = sx.uncast(node)
        if node is not None and node.type == "call_expression" and sx.call_name(node) in CONVERSION_CALLS \
                and len(sx.call_args(node)) == 1:
            node = sx.call_args(node)[0]
        else:
            return node
    return None


def _sum_products(body: Node, acc: str) -> tuple[Node, list[Node]]:
    """The term the loop adds to ``acc`` and the expressions whose product it is: ``acc += t;``, ``acc = acc + t;``,
    ``acc = t + acc;`` give ``t`` and ``[t]``; ``acc = fmaf(a, b, acc);`` gives the call and ``[a, b]``. One update,
    else :class:`Refused`."""
    updates = [n for n in sx.walk(body) if n.type == "assignment_expression"
               and sx.is_ident(sx.unparen(n.child_by_field_name("left")), acc)]
    if len(updates) != 1:
        raise Refused(f"{len(updates)} updates of {acc} in the loop (one sum wanted)")
    u = updates[0]
    right = sx.unparen(u.child_by_field_name("right"))
    if sx.operator(u) == "+=":
        return right, [right]
    if sx.operator(u) == "=" and right.type == "binary_expression" and sx.operator(right) == "+":
        a, b = right.child_by_field_name("left"), right.child_by_field_name("right")
        if sx.is_ident(sx.unparen(a), acc):
            return b, [b]
        if sx.is_ident(sx.unparen(b), acc):
            return a, [a]
    if sx.operator(u) == "=" and sx.call_name(right) in FMA_FUNCS:
        args = sx.call_args(right)
        if len(args) == 3 and sx.is_ident(sx.unparen(args[2]), acc):
            return right, [args[0], args[1]]
    raise Refused(f"the update {sx.text(u)!r} is not {acc} += term")


def _operands(unit: Unit, body: Node, ks: list[str], y: str, x: str, acc: str, uniform: set[str],
              consts: dict[str, Poly], derived: dict[str, list[Node]], pred: Node | None = None,
              accs: set[str] | None = None) -> tuple[list[_Operand], list[Node]]:
    """Every load of the loop, by buffer and index, with its side, and the index declarations only those loads use;
    refuses any other use of memory or of the indices. ``ks``: the loop variables (one, or a nest's, outermost
    first); ``derived``: :func:`_derived`'s declarations, whose names a side's loads may read."""
    side_names = {side: {y if side == "y" else x} | set().union(*(sx.declared_names(d) for d in derived.get(side, [])))
                  for side in ("y", "x")}
    k = ks[-1]
    pointers = unit.pointers
    roots = pointer_roots(unit)
    offsets = pointer_offsets(unit, roots)
    local = sx.declared_names(body)
    found: dict[tuple, _Operand] = {}
    inside: set[int] = set()
    for n in sx.walk(body):
        if n.type == "pointer_expression":
            raise Refused(f"{sx.text(n)!r} in the loop (only p[i] loads are staged)")
        if n.type != "subscript_expression":
            continue
        arg = sx.uncast(n.child_by_field_name("argument"))
        via = sx.text(arg) if sx.is_ident(arg) else None
        name = roots.get(via)
        if name not in pointers or via in local or via not in offsets:
            raise Refused(f"{sx.text(n)!r} in the loop is not a load of a pointer parameter (or of a pointer into one "
                          "at a known offset)")
        pp = pointers[name]
        if _unqualified(unit.types.element.get(via)) != _unqualified(pp.base):
            raise Refused(f"{via} points into {name} as another type")
        aliases = [a for a, r in roots.items() if r == name]
        if pp.writes or any(array_written(unit.body, a) for a in aliases) or not all(_alias_init(u, roots) for u in pp.other):
            raise Refused(f"{name} is written or aliased in the kernel")
        idx = sx.subscript_index(n)
        p = poly(idx) if idx is not None else None
        p = _substitute(add(offsets[via], p), consts) if p is not None else None
        if p is None:
            raise Refused(f"the index of {sx.text(n)!r} is not a polynomial")
        names = {v for mono in p for v in mono}
        allowed = uniform | UNIFORM_BUILTINS | set(ks) | side_names["y"] | side_names["x"]
        if not names <= allowed:
            raise Refused(f"the index of {sx.text(n)!r} uses {sorted(names - allowed)}, not uniform over the block")
        rest, strides = p, {}
        for v in ks:
            parts = split(rest, v)
            if parts is None:
                raise Refused(f"the load {sx.text(n)!r} is not affine in {v}")
            strides[v], rest = parts
            if any(w in side_names["y"] | side_names["x"] | set(ks) for mono in strides[v] for w in mono):
                raise Refused(f"the stride of {v} in {sx.text(n)!r} is not uniform")
        if not any(strides.values()):
            raise Refused(f"the load {sx.text(n)!r} does not advance with {k}" if len(ks) == 1 else
                          f"the load {sx.text(n)!r} advances with none of {', '.join(ks)}")
        stride = strides[k]
        rest_names = {v for mono in rest for v in mono}
        on_y, on_x = bool(rest_names & side_names["y"]), bool(rest_names & side_names["x"])
        if on_y and on_x:
            raise Refused(f"the load {sx.text(n)!r} depends on both the row and the column")
        if not on_y and not on_x:
            raise Refused(f"the load {sx.text(n)!r} depends on neither the row nor the column")
        side = "y" if on_y else "x"
        ctype = _unqualified(pp.base)
        if ctype not in ELEMENT_BYTES:
            raise Refused(f"{name}'s element type {ctype!r} is not staged")
        key = (name, tuple(sorted(p.items())))
        # consecutive threads load along k where k's stride is 1, unless consecutive columns (rows) are adjacent too,
        # the longer run (a convolution's input: along its output column, not its KW kernel columns)
        side_unit = any(c == 1 and len(m) == 1 and m[0] in side_names[side] for m, c in rest.items())
        if key not in found:
            found[key] = _Operand(name, p, side, ctype, stride == {(): 1} and not side_unit, [])
        found[key].nodes.append(n)
        inside.update(m.id for m in sx.walk(n))
    if not found:
        raise Refused("no loads in the loop")
    if pred is not None:
        _mask(unit, pred, body, acc, ks, uniform, consts, side_names, found)
        inside.update(m.id for m in sx.walk(pred.child_by_field_name("condition")))
    if len(found) > MAX_OPERANDS:
        raise Refused(f"{len(found)} distinct loads in the loop (at most {MAX_OPERANDS} are staged)")
    dropped = _index_declarations(body, consts, inside)
    inside |= {m.id for d in dropped for m in sx.walk(d)}
    for n in sx.walk(body):
        if n.id in inside or n.type != "identifier" or (n.parent is not None and n.parent.type == "call_expression"
                                                        and n.parent.child_by_field_name("function") == n):
            continue
        v = sx.text(n)
        if v in (y, x):
            raise Refused(f"{v} used in the loop outside its loads")
        if v not in local | uniform | (accs or {acc}) | ({k} if len(ks) == 1 else set()):
            raise Refused(f"{v} (declared before the loop) used in the loop outside its loads")
    for n in sx.walk(body):
        if n.type == "call_expression" and sx.call_name(n) not in PURE_CALLS:
            raise Refused(f"a call to {sx.text(n.child_by_field_name('function'))} in the loop")
    return list(found.values()), dropped


def _unqualified(ctype: str | None) -> str | None:
    return None if ctype is None else " ".join(w for w in ctype.split() if w not in ("const", "volatile"))


def _alias_init(use: Node, roots: dict[str, str]) -> bool:
    """``use`` (a pointer parameter's name) sits in the initial value of a pointer declared from it (``T* p = A + e``)."""
    node = use.parent
    while node is not None and node.type not in ("init_declarator", "compound_statement"):
        node = node.parent
    if node is None or node.type != "init_declarator":
        return False
    d = node.child_by_field_name("declarator")
    value = node.child_by_field_name("value")
    return (d is not None and d.type == "pointer_declarator" and sx.text(sx.innermost_identifier(d)) in roots
            and value is not None and value.start_byte <= use.start_byte < value.end_byte)


def _index_declarations(body: Node, consts: dict[str, Poly], inside: set[int]) -> list[Node]:
    """The loop body's declarations of index constants (``int xi = ci * P + p;``) used only in staged loads: gone
    from the per-output body, where the tiles replace the loads."""
    if body.type != "compound_statement":
        return []
    out = []
    for s in sx.statements(body):
        if s.type != "declaration":
            continue
        names = [sx.text(sx.innermost_identifier(d)) for d in s.children_by_field_name("declarator")]
        if not names or any(d.type != "init_declarator" for d in s.children_by_field_name("declarator")) \
                or not all(v in consts for v in names):
            continue
        uses = [n for n in sx.walk(body) if n.type == "identifier" and sx.text(n) in names
                and not s.start_byte <= n.start_byte < s.end_byte]
        if all(n.id in inside for n in uses):
            out.append(s)
    return out


def _check_post(post: list[Node], pre: list[Node], y: str, x: str) -> None:
    mine = set().union(*(sx.declared_names(s) for s in pre + post)) if pre + post else set()
    for s in post:
        stray = sx.written_names(s) - mine
        if stray:
            raise Refused(f"the epilogue writes {sorted(stray)}, declared before the guard (it now runs once per output)")
        if sx.contains_type(s, ("break_statement", "continue_statement")) and not sx.contains_type(s, sx.LOOPS):
            raise Refused("break or continue in the epilogue")


def _check_outputs(unit: Unit, stmts: list[Node], consts: dict[str, Poly]) -> None:
    """Each buffer the epilogue writes is accessed there at one index (its own output's element): reading another
    output's element would now depend on the order of a thread's outputs (and was a race between threads before)."""
    roots = pointer_roots(unit)
    offsets = pointer_offsets(unit, roots)
    seen: dict[str, set] = {}
    written: set[str] = set()
    local = set().union(*(sx.declared_names(s) for s in stmts)) - set(roots) if stmts else set()
    for s in stmts:
        for n in sx.walk(s):
            if n.type != "subscript_expression" and not (n.type == "pointer_expression" and sx.operator(n) == "*"):
                continue
            via = access_base(n)
            if via in local:
                continue  # a thread-local array
            root = roots.get(via)
            if root is None:
                if access_kind(n) != "reads":
                    raise Refused(f"the epilogue writes through {sx.text(n)!r}, not a known pointer into a buffer")
                continue
            idx = sx.subscript_index(n) if n.type == "subscript_expression" else None
            p = poly(idx) if idx is not None else None
            key = None if p is None or via not in offsets else tuple(sorted(_substitute(add(offsets[via], p), consts).items()))
            seen.setdefault(root, set()).add(key)
            if access_kind(n) != "reads":
                written.add(root)
    for root in sorted(written):
        if len(seen[root]) != 1 or None in seen[root]:
            raise Refused(f"the epilogue accesses {root}, which it writes, at more than one (or an unknown) index")


def _digits(p: _Plan, value: str) -> list[str]:
    """C expressions of the digits of ``value`` (a k counted from the first) in the nest's levels, outermost first: the
    innermost varies fastest (``ptxf_q{i}``: each level's count, at least 1)."""
    last = len(p.levels) - 1
    out = []
    for i in range(last + 1):
        below = " * ".join(f"ptxf_q{j}" for j in range(i + 1, last + 1))
        digit = f"({value}) / ({below})" if below else f"({value})"
        out.append(f"({digit}) % ptxf_q{i}" if i > 0 else digit)
    return out


def _render(p: Poly) -> str:
    """A polynomial as a 64-bit C expression (``(long long)row * (long long)K + (long long)k``)."""
    terms = []
    for mono, c in sorted(p.items()):
        factors = [f"(long long)({v})" for v in mono]
        if c != 1 or not factors:
            factors.insert(0, f"({c}LL)")
        terms.append(" * ".join(factors))
    return " + ".join(terms) if terms else "0"


def _dedent_lines(lines: list[str]) -> list[str]:
    pad = min((len(line) - len(line.lstrip()) for line in lines if line.strip()), default=0)
    return [line[pad:] for line in lines]


def _dedent(text: str, data: bytes, node: Node) -> list[str]:
    """A statement's text as lines, its continuation lines dedented by the statement's own indentation."""
    indent, _ = sx.line_indent(data, node.start_byte)
    lines = text.split("\n")
    return [lines[0]] + [line[len(indent):] if line.startswith(indent.decode()) else line for line in lines[1:]]
