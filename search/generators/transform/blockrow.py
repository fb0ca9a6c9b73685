"""``blockrow``: a kernel written one block per row gets any number of lanes per row (a sub-warp, a warp, a block).

Pattern: the classic first version of a row reduction or normalisation::

    __shared__ float partial[256];
    int row = blockIdx.x;                       // (casts allowed); blockIdx is used nowhere else
    if (row >= M) return;                       // optional
    for (int i = threadIdx.x; i < N; i += blockDim.x) sum += ...;
    partial[threadIdx.x] = sum;                 // a reduction idiom: the store,
    __syncthreads();                            //   a barrier,
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {   //   the tree loop (the one shuffle_reduce reads),
        if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    float mu = partial[0] / N;                  //   then reads of partial[0] only, until the next store
    ...
    if (threadIdx.x == 0) mean[row] = mu;

The block's threads are the row's lanes: ``threadIdx.x`` stays the lane and ``blockDim.x`` the number
of lanes, and the block gets ``blockDim.y`` rows (``row = blockIdx.x * blockDim.y + threadIdx.y``).
Each reduction idiom becomes ``const T ptxf_rK = ptxf_row_reduce(value, op);`` (shuffles within a
warp's group of lanes, shared memory across warps only when a row has more than a warp), the reads
of ``partial[0]`` read ``ptxf_rK``, the shared array goes, and every other ``__syncthreads()``
becomes ``ptxf_row_sync()`` (the row's lanes: ``__syncwarp`` on their mask, or the block's barrier
when a row is a whole block). The launch: lanes per row chosen at launch from the row's loop length
(``auto``, as ``rowpar_auto`` does) or fixed, rows per block to fill 256 threads, and the grid the
original grid (one block per row) divided by the rows per block.

Refused: a launch that is not 1-D with a literal block (a multiple of 32) or ``policy = "fixed"``;
``blockIdx`` other than in the row's declaration; ``gridDim``, ``threadIdx.y/z``, ``blockDim.y/z``;
warp collectives; shared data used outside the reduction idioms; a sum in a spec that asks for
exact results (the partial sums are combined in another order; max and min stay exact).
"""
from __future__ import annotations

from dataclasses import dataclass

from ptxfactory.protocol import LaunchConfig
from ptxfactory.protocol.expr import ExprError, evaluate, to_c

from ...base import size_names
from . import syntax as sx
from .base import BLOCK_FUNCTIONS_NOTE, Unit, int_literal
from .grid_stride import FACTS_NOTE
from .rowpar import GROUP_BLOCK, MAX_GRID, PlannedPass, Refused, helper_closure, spec_expression, auto_shape
from .shuffle_reduce import SHUFFLE_TYPES, _is_barrier, _is_block_size, _is_sub, _is_tid, _shared_arrays, _tid_aliases, match_tree
from .syntax import Node

COLLECTIVES = ("__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync", "__ballot_sync", "__any_sync",
               "__all_sync", "__activemask", "__reduce_add_sync", "__match_any_sync", "__syncwarp",
               "__syncthreads_count", "__syncthreads_or", "__syncthreads_and")


@dataclass
class _Idiom:
    store: Node  # sh[tid] = value;
    loop: Node  # the tree loop
    array: str
    ctype: str
    op: str
    value: Node
    reads: list[Node]  # sh[0] reads served by this reduction
    barrier: Node  # the barrier after the group's stores
    last: Node  # the group's last tree loop (a loop may halve several arrays; a group may have a loop each)


class BlockRowPass(PlannedPass):
    """One block per row -> ``lanes`` lanes per row (``"auto"``: chosen at launch). See the module docstring."""

    group = "grid"
    exact = False
    one_block = False  # a kernel launched as one block (no row index) is a row only where a row spans blocks

    def __init__(self, lanes: int | str):
        if lanes not in ("auto", 8, 32, 128, 256, 1024):
            raise ValueError(f"blockrow: lanes per row must be 'auto', 8, 32, 128, 256 or 1024, not {lanes!r}")
        self.lanes = lanes
        self.name = f"blockrow_{lanes}" if lanes == "auto" else f"blockrow_lanes{lanes}"

    def _plan(self, unit: Unit):
        threads = unit.block_threads()
        if unit.body is None or unit.spec.launch.policy != "free" or len(unit.launch.grid) != 1 or not unit.block_is_1d() \
                or threads is None or threads % 32:
            raise Refused("not a 1-D launch of a literal block (a multiple of 32) with launch.policy = \"free\"")
        body = unit.body
        row = _row_decl(body)
        if row is None and not (self.one_block and _one_block(unit)):
            raise Refused("no row = blockIdx.x declaration")
        if row is not None and sx.text(row.child_by_field_name("declarator")) in sx.written_names(body):
            raise Refused("the row index is written")
        for n in sx.walk(body):
            if n.type == "field_expression":
                arg, fld = sx.text(n.child_by_field_name("argument")), sx.text(n.child_by_field_name("field"))
                if arg == "gridDim" or (arg in ("threadIdx", "blockDim") and fld != "x"):
                    raise Refused(f"{sx.text(n)} used")
                if arg == "blockIdx" and (row is None or not _inside(n, row)):
                    raise Refused("blockIdx used outside the row's declaration")
        if sx.contains_call(body, COLLECTIVES) or any(n.type == "gnu_asm_expression" for n in sx.walk(body)):
            raise Refused("warp collectives or inline asm")
        helpers = unit.notes.get(BLOCK_FUNCTIONS_NOTE, frozenset())
        called = next((n for n in sx.walk(body) if sx.call_name(n) in helpers), None)
        if called is not None:
            raise Refused(f"line {called.start_point[0] + 1}: {sx.call_name(called)}() reads the thread's index or waits "
                          "for the block's threads: which threads a row has would change under it")
        shared = _shared_arrays(body)
        aliases = _tid_aliases(body)
        idioms = _idioms(unit, body, shared, aliases, threads)
        covered = {n.id for i in idioms for n in sx.walk(i.store)} | {n.id for i in idioms for n in sx.walk(i.loop)} \
            | {n.id for i in idioms for r in i.reads for n in sx.walk(r)}
        for n in sx.walk(body):
            if sx.is_ident(n) and sx.text(n) in shared and n.id not in covered and not _declares_shared(n):
                raise Refused(f"shared array {sx.text(n)!r} used outside a reduction idiom (line {n.start_point[0] + 1})")
        if any(n.type in ("type_qualifier", "storage_class_specifier") and sx.text(n) == "__shared__"
               and not _shared_decl_of(n, shared) for n in sx.walk(body)):
            raise Refused("shared data other than reduction arrays")
        strided = {loop.id for loop in _strided_loops(body, aliases, threads)}
        for loop in _lane_started(body, aliases):
            if loop.id not in strided:
                raise Refused(f"the loop at line {loop.start_point[0] + 1} starts at the thread's index but is not "
                              f"i < n; i += blockDim.x (or the block's {threads})")
        if not idioms and not strided:
            raise Refused("nothing a row's lanes share: no reduction idiom and no loop strided by blockDim.x")
        _check_lane_uses(body, idioms, aliases, threads)
        exact_only = unit.spec.check.rtol == 0 and unit.spec.check.atol == 0
        if exact_only and any(i.op == "+" and i.ctype in ("float", "double") for i in idioms):
            raise Refused("a floating-point sum where the spec asks for exact results")
        launch = self._launch(unit, body, aliases)
        return row, idioms, shared, launch

    def _launch(self, unit: Unit, body: Node, aliases: set[str]) -> LaunchConfig:
        rows = f"({unit.launch.grid[0]})"  # one block per row
        if self.lanes == "auto":
            loops = _strided_loops(body, aliases, unit.block_threads())
            n = None
            for loop in loops:
                c = sx.unparen(loop.child_by_field_name("condition"))
                n = spec_expression(unit, c.child_by_field_name("right"), None, start_zero=True)
                if n is not None:
                    break
            if n is None:
                raise Refused("the row's loop length is not an expression of the spec's sizes")
            block, grid = auto_shape(unit, rows, n)
        else:
            self._check_few_rows(unit, rows)
            per = GROUP_BLOCK // self.lanes if self.lanes <= 32 else 1  # a row wider than a warp has its block
            block, grid = [self.lanes, per], (rows if per == 1 else f"cdiv({rows}, {per})")
        if grid != rows:
            self._row_count_c(unit)  # (the rows past the end of the grid's last block return: their count in C)
        for size in unit.spec.check.sizes + unit.spec.bench.sizes:
            try:
                g = int(evaluate(grid, size))
                dims = [int(evaluate(b, size)) for b in block]
            except ExprError as e:
                raise Refused(f"launch cannot be evaluated at {size}: {e}") from None
            if not 0 < g <= MAX_GRID or dims[0] * dims[1] > 1024:
                raise Refused(f"launch out of range at {size}")
        return LaunchConfig(grid=[grid], block=block, shared_mem=unit.launch.shared_mem)

    def apply(self, unit: Unit) -> Unit:
        row, idioms, shared, launch = self._plan(unit)
        data = unit.data
        edits = []
        value = row.child_by_field_name("value")
        ctype = sx.type_text(row.parent.child_by_field_name("type"))
        edits.append((value.start_byte, value.end_byte,
                      f"({ctype})((unsigned long long)blockIdx.x * blockDim.y + threadIdx.y)".encode()))
        if launch.grid[0] != f"({unit.launch.grid[0]})":  # several rows a block: the last block's extra rows stop
            name = sx.text(row.child_by_field_name("declarator"))
            guard = f"\n    if ((long long)({name}) >= {self._row_count_c(unit)}) return;  // (transform blockrow: rows past the end)"
            edits.append((row.parent.end_byte, row.parent.end_byte, guard.encode()))
        edits += drop_launch_bounds(unit)
        used = set()
        names = {r.id: f"ptxf_r{k}".encode() for k, i in enumerate(idioms) for r in i.reads}
        in_stores = [(i.store.start_byte, i.store.end_byte) for i in idioms]
        for k, i in enumerate(idioms):
            name = f"ptxf_r{k}"
            combine = "ptxf_a + ptxf_b" if i.op == "+" else f"{i.op}(ptxf_a, ptxf_b)"
            op = f"[](const {i.ctype}& ptxf_a, const {i.ctype}& ptxf_b) {{ return ({i.ctype})({combine}); }}"
            value = sx.render(i.value, data, lambda n: names.get(n.id)).decode()  # (an earlier group's sh[0] in it)
            stmt = f"const {i.ctype} {name} = ptxf_row_reduce(({i.ctype})({value}), {op});  // (transform blockrow)"
            edits.append((i.store.start_byte, i.store.end_byte, stmt.encode()))
            for r in i.reads:
                if not any(a <= r.start_byte < b for a, b in in_stores):
                    edits.append((r.start_byte, r.end_byte, name.encode()))
            used.add("ptxf_row_reduce")
        for barrier, last in {(i.barrier.start_byte, i.last.end_byte) for i in idioms}:  # the group's barrier and trees go
            edits.append((barrier, last, b""))
        for n in sx.walk(unit.body):  # the other barriers order the row's global accesses: the row's lanes suffice
            if _is_barrier(n) and not any(i.barrier.start_byte <= n.start_byte < i.last.end_byte for i in idioms):
                call = n.named_children[0]
                edits.append((call.start_byte, call.end_byte, b"ptxf_row_sync()"))
                used.add("ptxf_row_sync")
        for step in _constant_steps(unit.body, _tid_aliases(unit.body), unit.block_threads()):
            edits.append((step.start_byte, step.end_byte, b"blockDim.x"))  # (the block's size in numbers: now a row's lanes)
        for n in sx.walk(unit.body):  # the shared arrays go
            if n.type == "declaration" and any(c.type == "type_qualifier" and sx.text(c) == "__shared__" for c in n.children):
                edits.append((n.start_byte, n.end_byte, b"// (transform blockrow: the shared reduction array is gone)"))
        text = sx.apply_edits(data, edits)
        return unit.with_text(text, launch=launch, helpers=helper_closure(sorted(used)), lanes=self.lanes)


    def _row_count_c(self, unit: Unit) -> str:
        """The original grid's x extent (one block a row: the row count) as a C expression of the kernel's scalars.
        Raises :class:`Refused` where it has none."""
        try:
            return to_c(unit.launch.grid[0], size_names(unit.spec))
        except ExprError as exc:
            raise Refused(f"the row count {unit.launch.grid[0]!r} has no C form in the kernel's scalars ({exc}): the "
                          "rows past the end of a block of several rows could not be told to stop") from None

    def _check_few_rows(self, unit: Unit, rows: str) -> None:
        """Refuses fewer lanes a row than the original's block where the rows are fewer than the GPU's SMs at every
        bench size (the GPU's facts known): a block a row already leaves SMs idle, and fewer lanes would only idle
        more (``blockrow_auto`` sizes the lanes from the row; ``blockrow_cluster`` spreads a row over blocks)."""
        facts, threads = unit.notes.get(FACTS_NOTE), unit.block_threads()
        if facts is None or threads is None or self.lanes >= threads or not unit.spec.bench.sizes:
            return
        try:
            most = max(int(evaluate(rows, size)) for size in unit.spec.bench.sizes)
        except (ExprError, ValueError):
            return
        if most < facts.sm_count:
            raise Refused(f"{most} rows at most at the bench sizes, fewer than the GPU's {facts.sm_count} SMs: "
                          f"{self.lanes} lanes a row instead of the block's {threads} would leave more of it idle")


def drop_launch_bounds(unit: Unit) -> list[tuple[int, int, bytes]]:
    """The edit removing the kernel's ``__launch_bounds__(...)``, written for the original's block: a rewrite that
    launches more threads a block would fail to launch under it (``launch_bounds`` may add the new one back)."""
    return [(c.start_byte, c.end_byte, b"") for c in unit.fn.children if c.type == "launch_bounds"]


def _row_decl(body: Node) -> Node | None:
    """The ``init_declarator`` of ``T row = blockIdx.x;`` among the body's top-level statements."""
    for stmt in sx.statements(body):
        if stmt.type != "declaration":
            continue
        for d in stmt.children_by_field_name("declarator"):
            if d.type == "init_declarator" and sx.is_builtin(d.child_by_field_name("value"), "blockIdx"):
                return d if sx.type_text(stmt.child_by_field_name("type")) in sx.INT_TYPES else None
    return None


def _one_block(unit: Unit) -> bool:
    """The launch is one block: a grid of literal 1s (the kernel's one row is the whole block)."""
    return all(int_literal(g) == 1 for g in unit.launch.grid)


def _inside(node: Node, ancestor: Node) -> bool:
    while node is not None:
        if node == ancestor:
            return True
        node = node.parent
    return False


def _declares_shared(ident: Node) -> bool:
    p = ident.parent
    return p is not None and p.type == "array_declarator"


def _shared_decl_of(qualifier: Node, shared: dict[str, str]) -> bool:
    decl = qualifier.parent
    if decl is None or decl.type != "declaration":
        return False
    names = [sx.text(sx.innermost_identifier(d)) for d in decl.children_by_field_name("declarator")]
    return bool(names) and all(n in shared for n in names)


def _strided_loops(body: Node, aliases: set[str], threads: int | None = None) -> list[Node]:
    """Loops ``for (T i = threadIdx.x; i < n; i += blockDim.x)``: the step ``blockDim.x``, a never-written copy of it,
    or a constant equal to the block's ``threads`` (``i += BLOCK``, the ``#define`` expanded)."""
    out = []
    dims = _tid_aliases(body, "blockDim")
    for loop in _lane_started(body, aliases):
        c = sx.unparen(loop.child_by_field_name("condition"))
        if c is None or c.type != "binary_expression" or sx.operator(c) != "<":
            continue
        step = _step(loop)
        if step is not None and (_is_block_size(step, dims) or (threads is not None and sx.int_constant(step) == threads)):
            out.append(loop)
    return out


def _lane_started(body: Node, aliases: set[str]) -> list[Node]:
    """Loops ``for (T i = threadIdx.x; ...; ...)`` (or a copy of threadIdx.x): a lane's loops, whatever their step."""
    out = []
    for loop in sx.walk(body):
        if loop.type != "for_statement":
            continue
        init = loop.child_by_field_name("initializer")
        if init is None or init.type != "declaration":
            continue
        ds = init.children_by_field_name("declarator")
        if len(ds) == 1 and ds[0].type == "init_declarator" and _lane_term(ds[0].child_by_field_name("value"), aliases):
            out.append(loop)
    return out


def _lane_term(value: Node | None, aliases: set[str]) -> Node | None:
    """The lane in a loop's start ``tid`` or ``a + tid`` (``row * N + tid``: the row's base, then the lane), where
    nothing else in the start is the lane; else None."""
    terms = sx.operands(value, "+")
    lanes = [t for t in terms if _is_tid(t, aliases)]
    if len(lanes) != 1 or any(_mentions_lane(t, aliases) for t in terms if t is not lanes[0]):
        return None
    return lanes[0]


def _mentions_lane(node: Node, aliases: set[str], builtin: str = "threadIdx") -> bool:
    """``node`` reads ``threadIdx.x`` (``builtin``'s x: ``blockDim`` for the block's size) or one of its copies."""
    return any(sx.is_builtin(n, builtin) or (sx.is_ident(n) and sx.text(n) in aliases) for n in sx.walk(node)
               if n.type in ("field_expression", "identifier"))


def _check_lane_uses(body: Node, idioms: list, aliases: set[str], threads: int) -> None:
    """Refuses a use of the thread's index (``threadIdx.x`` or a copy) or of the block's size (``blockDim.x`` or a
    copy) that a new count of lanes a row would change the meaning of. Allowed: a copy's declaration; the reduction
    idioms (rewritten); the start of a strided loop (``tid`` or ``a + tid``) and its step; ``tid == 0`` as the whole
    condition of an ``if`` with no barrier under it (the row's one store). Anything else (``part[row * 256 + tid]``,
    ``if (tid < 256)``, ``(float)tid / blockDim.x``, ``n / blockDim.x``, a ``while`` loop from ``tid``) is refused with
    its line: the lanes of the original's block are not the lanes of the rewrite's row."""
    dims = _tid_aliases(body, "blockDim")
    ok: set[int] = set()
    for i in idioms:  # the store's place sh[tid] (its value is a lane's partial: a use there is a use) and the tree
        ok |= {n.id for n in sx.walk(i.store.named_children[0].child_by_field_name("left"))} | {n.id for n in sx.walk(i.loop)}
    for n in sx.walk(body):
        if n.type == "init_declarator" and sx.is_ident(n.child_by_field_name("declarator")) \
                and sx.text(n.child_by_field_name("declarator")) in aliases | dims:
            ok |= {m.id for m in sx.walk(n)}
            ctype = sx.type_text(n.parent.child_by_field_name("type")) if n.parent is not None else ""
            if ctype not in sx.INT_TYPES or _narrow(ctype):
                raise Refused(f"line {n.start_point[0] + 1}: {sx.text(n)} of type {ctype!r}: more lanes than it holds")
    for n in sx.walk(body):  # a cast of the index or the block's size to a narrow type wraps with more lanes
        if n.type == "cast_expression" and _narrow(sx.type_text(n.child_by_field_name("type"))) \
                and (_mentions_lane(n, aliases) or _mentions_lane(n, dims, "blockDim")):
            raise Refused(f"line {n.start_point[0] + 1}: {sx.text(n)}: a narrow type wraps with more lanes")
    strided = _strided_loops(body, aliases, threads)
    for loop in strided:
        init = loop.child_by_field_name("initializer")
        d = init.children_by_field_name("declarator")[0]
        ok |= {m.id for m in sx.walk(_lane_term(d.child_by_field_name("value"), aliases))}
        ok |= {m.id for m in sx.walk(_step(loop))}
        line = loop.start_point[0] + 1
        ctype = sx.type_text(init.child_by_field_name("type"))
        if ctype not in sx.INT_TYPES or _narrow(ctype):
            raise Refused(f"line {line}: a loop index of type {ctype!r} strided by the lanes: more lanes than it holds")
        inner = loop.child_by_field_name("body")
        if any(sx.call_name(m) == "__syncthreads" for m in sx.walk(inner)):
            raise Refused(f"line {line}: a barrier inside a loop strided by the lanes (their trip counts differ)")
        if any(m.type in ("break_statement", "return_statement", "goto_statement") and _exits(m, loop) for m in sx.walk(inner)):
            raise Refused(f"line {line}: a loop strided by the lanes that stops early: which elements a lane visits "
                          "would change with the lanes")
        if any(other is not loop and _inside(other, loop) for other in strided):
            raise Refused(f"line {line}: loops strided by the lanes nested in each other")
    _check_partials(body, idioms, strided)
    for n in sx.walk(body):
        if n.type != "if_statement":
            continue
        c = sx.unparen(sx.clause_value(n.child_by_field_name("condition")))
        if c is not None and c.type == "binary_expression" and sx.operator(c) == "==" and any(
                _is_tid(a, aliases) and sx.is_number(b, 0) for a, b in ((c.child_by_field_name("left"), c.child_by_field_name("right")),
                                                                       (c.child_by_field_name("right"), c.child_by_field_name("left")))):
            if any(sx.call_name(m) == "__syncthreads" for m in sx.walk(n)):
                raise Refused(f"line {n.start_point[0] + 1}: a barrier under a test of the thread's index")
            if n.child_by_field_name("alternative") is not None:
                raise Refused(f"line {n.start_point[0] + 1}: an else for the threads other than the first: how many "
                              "run it would change with the lanes")
            ok |= {m.id for m in sx.walk(c)}
    for n in sx.walk(body):
        if n.id in ok or n.type not in ("field_expression", "identifier"):
            continue
        name = sx.text(n)
        if sx.is_builtin(n, "threadIdx") or (n.type == "identifier" and name in aliases):
            what = "the thread's index"
        elif sx.is_builtin(n, "blockDim") or (n.type == "identifier" and name in dims):
            what = "the block's size"
        else:
            continue
        if n.type == "identifier" and n.parent is not None and n.parent.type == "field_expression":
            continue  # (threadIdx itself, inside threadIdx.x)
        raise Refused(f"line {n.start_point[0] + 1}: {what} used as a value ({sx.text(n.parent) if n.parent is not None else name}): "
                      "its meaning would change with the lanes a row gets")


_NARROW_WORDS = ("char", "short", "int8_t", "uint8_t", "int16_t", "uint16_t")


def _narrow(ctype: str) -> bool:
    """An integer type narrower than 32 bits (``unsigned char``, ``short``, ``uint16_t``)."""
    return any(w in ctype.split() or ctype.endswith(w) for w in _NARROW_WORDS)


def _exits(jump: Node, loop: Node) -> bool:
    """The ``break``/``return``/``goto`` leaves ``loop`` (a ``break`` of a loop or switch nested in it does not)."""
    if jump.type != "break_statement":
        return True
    p = jump.parent
    while p is not None and p != loop:
        if p.type in ("for_statement", "while_statement", "do_statement", "switch_statement"):
            return False
        p = p.parent
    return True


def _check_partials(body: Node, idioms: list, strided: list[Node]) -> None:
    """Refuses a lane's state that leaves the lane other than through a reduction: each local a strided loop writes
    (declared outside it) must be read, outside the strided loops, only as the whole value of an idiom's store
    (``sh[tid] = acc;``), and a sum's partial must start at zero (a max's or min's start is taken again by every
    lane: any start gives the same result). Else the result would depend on how many lanes a row has: ``float acc =
    1.0f`` summed over more lanes, lane 0's own partial used after the tree, the last index a lane visited."""
    inside = {n.id for loop in strided for n in sx.walk(loop)}
    written = {loop.id: sx.written_names(loop.child_by_field_name("body")) - sx.declared_names(loop) for loop in strided}
    stores = {}
    for i in idioms:
        v = sx.uncast(i.value)
        if v is not None and v.type == "identifier":
            stores[v.id] = i
    for loop in strided:
        for name in sorted(written[loop.id]):
            reduced = None
            for n in sx.walk(body):
                if n.id in inside or not sx.is_ident(n, name):
                    continue
                p = n.parent
                if p is not None and p.type == "init_declarator" and p.child_by_field_name("declarator") == n:
                    continue  # its declaration
                if n.id in stores:
                    reduced = stores[n.id]
                    continue
                raise Refused(f"line {n.start_point[0] + 1}: {name}, which the loop at line {loop.start_point[0] + 1} "
                              "updates per lane, is used other than as the value a reduction stores")
            if reduced is not None and reduced.op == "+" and not _starts_at_zero(body, name):
                raise Refused(f"{name}: a lane's partial sum that does not start at 0 would count its start once a lane")
    partials = set().union(*written.values())
    for i in idioms:  # a sum of anything but a lane's partial (a uniform value, sh[0] of an earlier tree) counts it per lane
        v = sx.uncast(i.value)
        if i.op == "+" and not (v is not None and v.type == "identifier" and sx.text(v) in partials):
            raise Refused(f"line {i.store.start_point[0] + 1}: a sum of {sx.text(i.value)!r}, which no loop strided by the "
                          "lanes accumulates: it would be counted once a lane")


def _starts_at_zero(body: Node, name: str) -> bool:
    for n in sx.walk(body):
        if n.type == "init_declarator" and sx.is_ident(n.child_by_field_name("declarator"), name):
            v = sx.uncast(n.child_by_field_name("value"))
            return v is not None and sx.is_number(v) and sx.literal_value(v) == 0
    return False


def _step(loop: Node) -> Node | None:
    """``s`` of a loop's update ``i += s``, or None."""
    u = sx.unparen(loop.child_by_field_name("update"))
    if u is not None and u.type == "assignment_expression" and sx.operator(u) == "+=":
        return u.child_by_field_name("right")
    return None


def _constant_steps(body: Node, aliases: set[str], threads: int) -> list[Node]:
    """The steps of the strided loops written as the block's size in numbers (``i += 256``): a rewrite that changes
    the lanes of a row rewrites them too."""
    dims = _tid_aliases(body, "blockDim")
    return [s for loop in _strided_loops(body, aliases, threads) if not _is_block_size(s := _step(loop), dims)]


def _idioms(unit: Unit, body: Node, shared: dict[str, str], aliases: set[str], threads: int) -> list[_Idiom]:
    """Every reduction idiom in the body's statement lists, in order: stores ``sh[tid] = v;`` of one or more shared
    arrays, one barrier, then tree loops that halve those arrays (one loop of them all, a LayerNorm's sum and sum of
    squares together, or a loop each), then reads of ``sh[0]``. One :class:`_Idiom` per array."""
    out = []
    for block in [n for n in sx.walk(body) if n.type == "compound_statement"]:
        stmts = sx.statements(block)
        k = 0
        while k < len(stmts):
            j = k
            while j < len(stmts) and _store_to(stmts[j], shared, aliases) is not None:
                j += 1
            if j == k or j >= len(stmts) or not _is_barrier(stmts[j]):
                k = max(j, k + 1)
                continue
            trees, t = [], j + 1
            while t < len(stmts) and stmts[t].type == "for_statement":
                reds = match_tree(stmts[t], shared, aliases, threads)
                if reds is None:
                    break
                trees += reds
                t += 1
            stores = {_store_to(st, shared, aliases)[0]: st for st in stmts[k:j]}
            arrays = [r.array for r in trees]
            if not trees or len(stores) != j - k or sorted(stores) != sorted(arrays) \
                    or any(r.ctype not in SHUFFLE_TYPES for r in trees) \
                    or any(set(arrays) & sx.identifiers(_store_to(st, shared, aliases)[1]) for st in stmts[k:j]):
                k = j + 1
                continue
            for r in trees:
                reads = _reads_of_first(block, stmts[t:], r.array, aliases)
                if reads is None:
                    raise Refused(f"{r.array}[...] read other than at [0] after its reduction (line {r.loop.start_point[0] + 1})")
                out.append(_Idiom(stores[r.array], r.loop, r.array, r.ctype, r.op, _store_to(stores[r.array], shared, aliases)[1],
                                  reads, stmts[j], stmts[t - 1]))
            k = t
    return out


def _store_to(stmt: Node, shared: dict[str, str], aliases: set[str]) -> tuple[str, Node] | None:
    """``(array, value)`` of ``sh[tid] = value;`` with ``sh`` a shared array, or None."""
    if stmt.type != "expression_statement" or stmt.named_child_count != 1:
        return None
    a = stmt.named_children[0]
    if a.type != "assignment_expression" or sx.operator(a) != "=":
        return None
    left = a.child_by_field_name("left")
    array = sx.text(left.child_by_field_name("argument")) if left.type == "subscript_expression" else None
    if array not in shared or not _is_sub(left, array, lambda i: _is_tid(i, aliases)):
        return None
    return array, a.child_by_field_name("right")


def _bound_by_reference(parent: Node) -> bool:
    """``sh[0]`` passed to a function of the file (which may take it by reference) or bound to a reference
    (``float& r = sh[0];``): not a value the combined result can stand for."""
    if parent.type == "argument_list":
        call = parent.parent
        return call is None or sx.call_name(call) not in sx.VALUE_FUNCS
    return parent.type == "init_declarator" and parent.child_by_field_name("declarator").type == "reference_declarator"


def _reads_of_first(block: Node, after: list[Node], array: str, aliases: set[str]) -> list[Node] | None:
    """The ``array[0]`` reads in ``after`` up to the next ``array[tid] = ...`` store; None if another access comes first."""
    reads = []
    for stmt in after:
        if stmt.type == "expression_statement" and stmt.named_child_count == 1:
            a = stmt.named_children[0]
            if a.type == "assignment_expression" and _is_sub(a.child_by_field_name("left"), array, lambda i: _is_tid(i, aliases)):
                return reads
        for n in sx.walk(stmt):
            if sx.is_ident(n, array):
                access = n.parent
                if access is None or access.type != "subscript_expression":
                    return None
                idx = [c for c in access.child_by_field_name("indices").named_children if c.type != "comment"]
                parent = access.parent
                while parent is not None and parent.type == "parenthesized_expression":
                    parent = parent.parent
                if len(idx) != 1 or not sx.is_number(idx[0], 0) or (parent is not None and (
                        parent.type in ("update_expression", "pointer_expression")
                        or (parent.type == "assignment_expression" and parent.child_by_field_name("left") == access)
                        or _bound_by_reference(parent))):
                    return None
                reads.append(access)
    return reads
