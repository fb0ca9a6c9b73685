"""``vector_loops``: a lane-strided loop over a row moves 16 bytes per load and store.

Pattern: a loop whose iterations a group of lanes shares, one element per lane and step::

    for (T j = a + LANE; j < n; j += L) BODY

where ``LANE``/``L`` is ``threadIdx.x``/``blockDim.x`` (or the block's literal x size; the group is then the threads of one
``threadIdx.y``/``z``, rowpar's 2-D auto blocks included), or a lane variable declared ``lane = threadIdx.x % C`` (``& (C - 1)``; rowpar's ``ptxf_lane``) with
``L == C`` and the literal block a multiple of C (then the group is C consecutive threads), or
``ptxf_lane = threadIdx.x`` with ``L`` the block, or a grid-stride loop of a 1-D launch (``LANE`` = ``blockIdx.x * blockDim.x +
threadIdx.x``, ``L`` = ``gridDim.x * blockDim.x``, each also a local equal to it: grid_stride's loop, where atomic_agg's
register sum follows; the group is the whole grid, its uniform values the launch's sizes and parameters, and the widened
loop counts in 64 bits, since the grid's lanes times VEC may pass 2^31; atomic_agg's ``ptxf_hit`` flag, read only by a
ballot, is order-free). BODY reads (and writes) buffers at ``p[base + j]``
(``__ldg(p + base + j)`` and the other hint forms too), ``base`` the same for every lane of the group.

Rewrite: each lane takes VEC = 16 / sizeof(element) consecutive elements per step::

    {   const T s = a + head;                       // head: scalar, up to the first 16-byte boundary
        for (T v = s + LANE * VEC; v < e; v += L * VEC) {   // e: the end of the whole 16-byte chunks
            one 16-byte load per buffer read (uint4), BODY once per element k = 0..VEC-1 in order of j
            (``const T j = v + k``), one 16-byte store per buffer written
        }
        for (T j = e + LANE; j < n; j += L) BODY    // the tail, scalar, strided over the lanes
    }

Each lane still visits its elements in increasing ``j``; the group together visits every ``j`` in
``[a, n)`` exactly once, but which lane gets which element changes: accumulations (recognised by
:mod:`.reductions`) see other partial sums, so sums are re-associated (not exact); max/min stay exact,
and an arg max/min only when rowpar's index-aware combine follows the loop; an online softmax's or a Welford's
part (rowpar's tuples) is order-free within a lane, and is taken only when rowpar's merge of the parts follows.

Mixed element sizes (bf16 activations beside f32 tables): VEC is set by the widest element (16 bytes of it a step);
a narrower buffer moves VEC of its elements (8 bytes: ``uint2``), and the runtime check below compares the buffers'
offsets within their VEC-element chunks (in elements) instead of within 16 bytes.

Two ranges of one buffer (``v[j]`` and ``v[j + half]``, RoPE's rotate-half, a GLU's two halves) are two streams; when
one of them is written they must be proven apart at every size: their bases differ by at least the trip ``n - a``
(as polynomials of the kernel's names), else the loop is refused. A name aliasing another (``q = p``) counts as
another buffer range and is refused when it meets a write. A pointer cast (``(float*)((char*)p + 8)``) or a narrowing
cast in an index (``(unsigned char)N``) proves nothing (the polynomials read through casts): such ranges are not
proven apart, nor aligned by the spec.

Other loops. Widened, a lane owns other elements than as written (VEC in a row, after a head whose length depends on
the buffers' alignment, or the loop as written when the check fails), so a loop that touches a buffer another loop of
the kernel writes (or writes one another touches) is refused: lanes would exchange elements through memory with no
barrier. Loops on the two branches of one ``if`` (hold_row's register path and its original loops) never both run.

Alignment. The vectorised accesses need ``&p[base + s]`` 16-byte aligned for every buffer. When the
spec proves it (the buffer's ``align`` >= 16, and ``base + a`` a multiple of VEC through integer
literals and ``constraints`` such as ``N % 4 == 0``) there is no check and no head. Otherwise a
runtime check, the same for every lane of the group (see below): all the buffers' addresses at
``a`` must have the same remainder modulo 16 bytes; the head then runs the elements up to the first
16-byte boundary scalar. When the remainders differ the original loop runs unchanged.

Uniformity: the check, the head and the bounds must agree on every lane of the group, or lanes
would take different paths and elements be lost or doubled. ``a``, ``n``, ``base`` and a local
pointer ``p`` must be group-uniform: built from parameters and locals never written after their
declaration, ``blockIdx``/``blockDim``/``gridDim`` (and ``threadIdx.y``/``z`` for a
group of ``threadIdx.x`` lanes), literals, reads of buffers the kernel never
writes, and for a sub-block group ``(blockIdx.x * blockDim.x + threadIdx.x) / D`` with C dividing D
and D dividing the block. The loop must be reached by the whole group: enclosing ``if`` conditions
and ``for`` headers uniform, no ``return`` before it under a non-uniform condition.

Refused (the loop is left alone): ``break``/``continue``/``return``/``goto``, nested loops, barriers,
warp collectives, atomics or ``asm`` in the body; a buffer written at anything but ``q[base + j]``,
or read at another index or through another name in the loop (two ranges proven apart excepted, above); a write that is not a top-level
``q[base + j] = v;`` (``op=``, ``__stcs``) statement of the body (so every element of a stored chunk
is written, as in the original); a carried variable that is not a recognised accumulation; a float
sum or product when the spec asks for exact results (``rtol = atol = 0``); an arg reduction without
rowpar's combine, a tuple without rowpar's merge, or a tuple whose count is the loop index; vectorised buffers of a type without a packing here
(float, int, unsigned, __half, __nv_bfloat16); a pointer used otherwise in the body (address taken,
passed to a function). Reads that are not ``p[base + j]`` (neighbours ``x[j + 1]``, gathers, other
strides) of buffers the loop does not write stay scalar loads. ``launch`` is kept, so the pass also
applies under ``launch.policy = "fixed"``.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field

from . import syntax as sx
from .affine import Poly, add, poly
from .base import LOAD_FUNCS, STORE_FUNCS, Unit, access_kind, int_literal
from .grid_stride import GRID_INDEX, GRID_SIZE
from .syntax import COLLECTIVES
from .reductions import loop_accumulators
from .rowpar import LANE, Refused as RowRefused, row_constants, pointer_offsets, pointer_roots, written_roots
from .syntax import Node
from .vectorize import vector_load

VEC_BYTES = 16
PREFIX = "ptxf_vl"
GRID = "grid"  # the group of a grid-stride loop over a 1-D launch: every thread of the grid, one element each a step
# element type -> (size in bytes, bits -> element, element -> bits (an unsigned value))
ELEMENTS = {
    "float": (4, "__uint_as_float({})", "__float_as_uint((float)({}))"),
    "int": (4, "(int)({})", "(unsigned)(int)({})"),
    "int32_t": (4, "(int)({})", "(unsigned)(int)({})"),
    "unsigned": (4, "({})", "(unsigned)({})"),
    "unsigned int": (4, "({})", "(unsigned)({})"),
    "uint32_t": (4, "({})", "(unsigned)({})"),
    "__half": (2, "__ushort_as_half((unsigned short)({}))", "(unsigned)__half_as_ushort((__half)({}))"),
    "half": (2, "__ushort_as_half((unsigned short)({}))", "(unsigned)__half_as_ushort((__half)({}))"),
    "__nv_bfloat16": (2, "__ushort_as_bfloat16((unsigned short)({}))", "(unsigned)__bfloat16_as_ushort((__nv_bfloat16)({}))"),
    "nv_bfloat16": (2, "__ushort_as_bfloat16((unsigned short)({}))", "(unsigned)__bfloat16_as_ushort((__nv_bfloat16)({}))"),
}
# bytes a lane moves per buffer and step -> the unsigned vector type that carries them (the widest element moves 16)
CHUNKS = {16: "uint4", 8: "uint2"}
HINT_LOADS = frozenset({"__ldg", "__ldcs"})  # scalar hint -> the same function on the 16-byte value (uint4 overloads)
HINT_STORES = frozenset({"__stcs"})
PURE_FUNCS = sx.VALUE_FUNCS
NARROW = ("short", "unsigned short", "char", "signed char", "unsigned char", "int8_t", "uint8_t")
JUMPS = ("break_statement", "continue_statement", "return_statement", "goto_statement", "labeled_statement")
COMPONENTS = "xyzw"


class Refused(Exception):
    """The loop does something the pass does not prove safe (the message says what)."""


@dataclass
class _Access:
    """One access of a vectorised buffer in the body: the node replaced in each element copy."""

    node: Node          # p[idx] (read or write target) or the hint call
    j_node: Node        # the loop variable inside it
    kind: str           # "read" | "write" | "update" (op=) | "store" (__stcs)
    hint: str | None = None
    value: Node | None = None  # the stored value of a __stcs call


@dataclass
class _Stream:
    """One buffer range ``p[base + j]`` the loop reads or writes 16 bytes at a time."""

    ptr: str
    elem: str
    base_terms: list[Node]
    accesses: list[_Access] = field(default_factory=list)

    @property
    def written(self) -> bool:
        return any(a.kind != "read" for a in self.accesses)

    @property
    def elem_size(self) -> int:
        return ELEMENTS[self.elem][0]

    @property
    def loaded(self) -> bool:
        return any(a.kind in ("read", "update") for a in self.accesses)


@dataclass
class _Plan:
    loop: Node
    j: str
    ctype: str
    lane: str
    step: str
    step_vec: str  # the main loop's step: L * VEC
    start: str
    start_terms: list[Node]
    bound: Node
    streams: list[_Stream]
    vec: int
    size: int
    proven: bool
    pragma: Node | None
    uses_j: bool
    vtype: str = ""  # the main loop's index type: the loop's, or long long for a grid's lanes (lane * VEC may pass 2^31)


class VectorLoopsPass:
    """Lane-strided row loops -> VEC elements per lane and step: 16-byte loads and stores, scalar head and tail."""

    name = "vector_loops"
    group = None  # chains after rowpar (whose split loops it widens) and on block-per-row kernels alone
    exact = False  # the elements move between lanes: sums are re-associated

    def plans(self, unit: Unit) -> list[_Plan]:
        """A plan per loop the pass rewrites (loops refused are left out)."""
        if unit.body is None:
            return []
        a, out = LoopAnalysis(unit), []
        for n in sx.walk(unit.body):
            if n.type == "for_statement":
                try:
                    out.append(self.plan(unit, n, a))
                except Refused:
                    continue
        return out

    def candidates(self, unit: Unit) -> list[tuple[Node, str | None]]:
        """Every ``for`` loop of the kernel with why it is refused (None: rewritten)."""
        if unit.body is None:
            return []
        a, out = LoopAnalysis(unit), []
        for n in sx.walk(unit.body):
            if n.type == "for_statement":
                try:
                    self.plan(unit, n, a)
                    out.append((n, None))
                except Refused as e:
                    out.append((n, str(e)))
        return out

    def why_not(self, unit: Unit) -> str | None:
        """Why no loop is rewritten (None when one is): the reasons, one per loop."""
        c = self.candidates(unit)
        if any(r is None for _, r in c):
            return None
        return "; ".join(f"line {n.start_point[0] + 1}: {r}" for n, r in c) or "no loop"

    def applies(self, unit: Unit) -> bool:
        return bool(self.plans(unit))

    # -- analysis -------------------------------------------------------------------------------------------

    def plan(self, unit: Unit, loop: Node, a: "LoopAnalysis | None" = None) -> _Plan:
        """The rewrite of ``loop`` (raises :class:`Refused` with the reason when the loop is left alone)."""
        a = a or LoopAnalysis(unit)
        init, cond, upd, body = (loop.child_by_field_name(f) for f in ("initializer", "condition", "update", "body"))
        index = declared_index(loop)
        if isinstance(index, str):
            raise Refused(index)
        ctype, j, first = index
        if ctype not in sx.INT_TYPES or ctype.startswith(NARROW) or any(c.type == "type_qualifier" for c in init.children):
            raise Refused(f"index type {ctype!r}")
        if any(i.startswith(PREFIX) for i in sx.identifiers(loop)) or a.inside_rewrite(loop):
            raise Refused("already vectorised")
        # the lane term of the start, the step
        terms = plus_terms(first)
        u = sx.unparen(upd)
        well_formed = u.type == "assignment_expression" and sx.operator(u) == "+=" and sx.is_ident(sx.unparen(u.child_by_field_name("left")), j)
        step = sx.unparen(u.child_by_field_name("right")) if well_formed else None
        lane_nodes = a.grid_lane(terms, step)
        grid = lane_nodes is not None
        if lane_nodes is None:  # a row's lanes: a block, C of its threads, a cluster's blocks
            lanes = [t for t in terms if a.lane_group(t) is not None]
            if len(lanes) != 1:
                raise Refused("the start is not a + LANE")
            lane_nodes = lanes
            if not well_formed:
                raise Refused("the step is not j += L")
            if not a.step_matches(a.lane_group(lanes[0]), step):
                raise Refused(f"the step {sx.text(step)!r} is not the group's size")
        lane_text = sx.text(lane_nodes[0]) if len(lane_nodes) == 1 else "(" + " + ".join(sx.text(t) for t in lane_nodes) + ")"
        start_terms = [t for t in terms if not any(t is n for n in lane_nodes)]
        c = sx.unparen(cond)
        if c is None or c.type != "binary_expression":
            raise Refused("the condition is not j < n")
        op, left, right = sx.operator(c), sx.unparen(c.child_by_field_name("left")), sx.unparen(c.child_by_field_name("right"))
        if op == "<" and sx.is_ident(left, j):
            bound = c.child_by_field_name("right")
        elif op == ">" and sx.is_ident(right, j):
            bound = c.child_by_field_name("left")
        else:
            raise Refused("the condition is not j < n")
        # the body
        if sx.contains_type(body, JUMPS) or sx.contains_type(body, sx.LOOPS):
            raise Refused("break, continue, return, goto or a nested loop in the body")
        if sx.contains_call(body, COLLECTIVES) or any((sx.call_name(n) or "").startswith("atomic") for n in sx.walk(body)):
            raise Refused("a barrier, warp collective or atomic in the body")
        if any(n.type in ("gnu_asm_expression", "asm_statement") for n in sx.walk(body)):
            raise Refused("asm in the body")
        written = sx.written_names(body)
        if j in written:
            raise Refused("the index is written in the body")
        extra = a.context_uniform(loop)
        who = a.lane_reads(body, j, written, extra)
        if who is not None:  # widened, a lane runs other elements: what it computes from its identity would move
            raise Refused(f"the body reads {who!r}, which differs between the group's lanes")
        for t in start_terms + [bound]:
            if not a.uniform(t, extra) or sx.identifiers(t) & written:
                raise Refused(f"{sx.text(t)!r} is not the same for every lane of the group")
        self._accumulators(unit, a, loop, body, j, written)
        streams = self._streams(unit, a, body, j, extra, written, start_terms, bound)
        self._no_exchange(unit, a, loop, streams)
        size = max(ELEMENTS[s.elem][0] for s in streams)  # the widest element moves 16 bytes, the others fewer
        vec = VEC_BYTES // size
        for s in streams:
            if s.elem_size * vec not in CHUNKS:
                raise Refused(f"{s.ptr!r}: {s.elem_size * vec} bytes a chunk beside the 16 of the widest element")
            if s.elem_size * vec != VEC_BYTES and any((x.hint or "").startswith("ptxf_ldna_") for x in s.accesses):
                raise Refused(f"{s.ptr!r}: the no-allocate load hint has only a 16-byte form")
        proven = all(a.aligned(s, start_terms, vec) for s in streams)
        # j read other than in a vectorised access's address (a store's value is copied per element: j read there counts)
        spans = [(x.node.start_byte, x.node.end_byte) for s in streams for x in s.accesses]
        values = [(x.value.start_byte, x.value.end_byte) for s in streams for x in s.accesses if x.kind == "store" and x.value is not None]
        inside = lambda n, ranges: any(b <= n.start_byte < e for b, e in ranges)  # noqa: E731
        uses_j = any(sx.is_ident(n, j) and (not inside(n, spans) or inside(n, values)) for n in sx.walk(body))
        start = " + ".join(sx.text(t) for t in start_terms) or "0"
        lit = sx.literal_value(step) if sx.is_number(step) else None
        step_vec = str(lit * vec) if isinstance(lit, int) else f"({ctype})({sx.text(step)}) * {vec}"
        vtype = ctype
        if grid:  # a grid's lanes: the whole grid, times VEC
            vtype = ctype if ctype in sx.WIDE_INT_TYPES else "long long"
            step_vec = f"({vtype})({sx.text(step)}) * {vec}"
        return _Plan(loop, j, ctype, lane_text, sx.text(step), step_vec, start, start_terms, bound, streams, vec,
                     size, proven, unroll_pragma(loop), uses_j, vtype)

    def _accumulators(self, unit: Unit, a: "LoopAnalysis", loop: Node, body: Node, j: str, written: set[str]) -> None:
        carried = written - sx.declared_names(body) - {j}
        if any(n not in a.declared for n in carried):
            raise Refused("a variable declared outside the kernel is written")
        carried -= {n for n in carried if _any_flag(unit, loop, n)}
        if a.grid and any(not n.startswith("ptxf_acc") for n in carried):  # (what else reads a thread's partial sees another one)
            raise Refused(f"{', '.join(sorted(n for n in carried if not n.startswith('ptxf_acc')))}: a thread's part in a "
                          "grid-stride loop, which nothing combines (atomic_agg's register sum is)")
        accs = loop_accumulators(body, carried, j, tuples=True)
        if accs is None:
            raise Refused("a carried variable that is not a recognised accumulation")
        exact_only = unit.spec.check.rtol == 0 and unit.spec.check.atol == 0
        for acc in accs.values():
            if acc.kind in ("softmax", "welford"):  # each lane's part is order-free: rowpar's merge after the loop combines them
                if exact_only:
                    raise Refused(f"{', '.join(acc.names)}: a {acc.kind} merge re-associates (rtol = atol = 0)")
                if acc.counts:
                    raise Refused(f"{', '.join(acc.names)}: a {acc.kind} whose count is read from the loop index")
                if not _rowpar_tuple_merge(loop):
                    raise Refused(f"{', '.join(acc.names)}: a {acc.kind} without rowpar's merge of the lanes' parts after the loop")
                continue
            kind = sx._kind(unit.types.scalar.get(acc.name))
            if acc.kind in ("sum", "prod") and exact_only and kind != "int":
                raise Refused(f"{acc.name}: a floating-point {acc.kind} would be re-associated (rtol = atol = 0)")
            if acc.kind == "arg" and not _rowpar_arg_combine(loop, acc.name, acc.index):
                raise Refused(f"{acc.name}: an arg reduction without rowpar's index-aware combine after the loop")

    def _streams(self, unit: Unit, a: "LoopAnalysis", body: Node, j: str, extra: set[str], written: set[str],
                 start_terms: list[Node], bound: Node) -> list[_Stream]:
        local = sx.declared_names(body)
        streams: dict[tuple, _Stream] = {}
        scalar_roots: list[str | None] = []   # roots of buffer accesses kept scalar
        for n in sx.walk(body):
            if n.type != "identifier":
                continue
            name = sx.text(n)
            if name in local or (name not in a.ptr_names and name not in a.arrays):
                continue
            acc = access_of(n)
            if acc is None:
                raise Refused(f"{name!r} used otherwise than p[i] or a load/store hint (line {n.start_point[0] + 1})")
            node, idx_terms, kind, hint, value = acc
            if name in a.arrays:
                if kind != "read":
                    raise Refused(f"a thread-local or shared array {name!r} written in the loop")
                continue
            js = [t for t in idx_terms if sx.is_ident(t, j)]
            base = [t for t in idx_terms if not sx.is_ident(t, j)]
            elem = a.element(name)
            vectorisable = (
                len(js) == 1 and not any(j in sx.identifiers(t) for t in base) and elem is not None
                and all(a.uniform(t, extra) and not (sx.identifiers(t) & (written | local)) for t in base)
                and a.uniform_pointer(name, extra)
            )
            if not vectorisable:
                if kind != "read" and elem is None and len(js) == 1:
                    raise Refused(f"{name!r}: no 16-byte packing here for its element type")
                if kind != "read":
                    raise Refused(f"a write not of the form q[base + j]: {sx.text(node)!r}")
                scalar_roots.append(a.roots.get(name))
                continue
            key = (name, _key(base))
            s = streams.setdefault(key, _Stream(name, elem, base))
            s.accesses.append(_Access(node, js[0], kind, hint, value))
        for key, s in list(streams.items()):  # a buffer only read under a condition (i < M ? x[i] : 0) stays scalar:
            if not any(x.kind != "read" or _unconditional(x.node, body) for x in s.accesses):  # its chunk may pass its end
                del streams[key]
                scalar_roots.append(a.roots.get(s.ptr))
        if not streams:
            raise Refused("no access p[base + j] to vectorise (unconditionally)")
        out = _drop_neighbours(list(streams.values()), scalar_roots, a.roots)
        written_roots: dict[str, list[_Stream]] = {}
        for s in out:
            if s.written:
                root = a.roots.get(s.ptr)
                if root is None:
                    raise Refused(f"cannot tell which buffer {s.ptr!r} points into")
                written_roots.setdefault(root, []).append(s)
                tops = [x for x in s.accesses if x.kind != "read" and _top_level_statement(x.node, body)]
                if not tops:
                    raise Refused(f"{s.ptr!r}: no top-level unconditional store (every element of a chunk must be written)")
        if written_roots:
            if None in scalar_roots or any(r in written_roots for r in scalar_roots):
                raise Refused("a buffer written in the loop is also read at another index (or through an unknown pointer)")
            trip = _trip(start_terms, bound)
            for s in out:
                root = a.roots.get(s.ptr)
                if root is None and not s.written:
                    raise Refused(f"{s.ptr!r} reads through a pointer whose buffer is unknown, in a loop that writes")
                for w in written_roots.get(root, []):
                    if w is not s and not _disjoint(a, w, s, trip):
                        what = "writes" if s.written else "reads"
                        raise Refused(f"{s.ptr!r} {what} buffer {root!r} at a range not proven apart from the write through {w.ptr!r}")
        return out

    def _no_exchange(self, unit: Unit, a: "LoopAnalysis", loop: Node, streams: list[_Stream]) -> None:
        """Refuses when another loop of the kernel writes a buffer this one touches, or touches one it writes. Each
        lane then owns other elements than in the loop as written (VEC in a row, after a head whose length depends on
        the buffers' alignment; the original loop when that differs), so what one lane wrote another would read, with
        no barrier between (a race the kernel as written did not have)."""
        mine = {a.roots.get(s.ptr) for s in streams}
        mine_written = {a.roots.get(s.ptr) for s in streams if s.written}
        span = (loop.start_byte, loop.end_byte)
        for o in sx.walk(unit.body):
            if o.type not in sx.LOOPS or (o.start_byte <= span[0] and span[1] <= o.end_byte) \
                    or (span[0] <= o.start_byte and o.end_byte <= span[1]) or _exclusive(loop, o):
                continue  # this loop, a loop around it, one inside it, one on the other branch of an if
            shared = _shared(a, o, mine, mine_written, elements_only=False)
            if shared:
                raise Refused(f"the loop at line {o.start_point[0] + 1} also touches {', '.join(sorted(map(str, shared)))}, "
                              "which one of the two writes: lanes would exchange elements with no barrier")
        # straight-line code outside every loop (y[gid] = ...; then the loop reads y[i]): the same exchange
        for o in sx.walk(unit.body):
            if o.type not in ("expression_statement", "declaration", "return_statement", "condition_clause") \
                    or _in_loop(o, unit.body) or _exclusive(loop, o):
                continue
            shared = _shared(a, o, mine, mine_written, elements_only=True)
            if shared:
                raise Refused(f"line {o.start_point[0] + 1}, outside the loop, also touches {', '.join(sorted(map(str, shared)))}, "
                              "which one of the two writes: lanes would exchange elements with no barrier")

    # -- rewrite ------------------------------------------------------------------------------------------

    def apply(self, unit: Unit) -> Unit:
        plans = self.plans(unit)
        data = unit.data
        edits, helpers = [], []
        for p in plans:
            text, hs = self._emit(unit, p)
            start = p.pragma.start_byte if p.pragma is not None else p.loop.start_byte
            edits.append((start, p.loop.end_byte, text.encode()))
            helpers += hs
        vec_elems = sorted({p.vec for p in plans})
        return unit.with_text(sx.apply_edits(data, edits), helpers=helpers, vec=VEC_BYTES, vec_loops=len(plans),
                              vec_elems=vec_elems[0] if len(vec_elems) == 1 else vec_elems)

    def _emit(self, unit: Unit, p: _Plan) -> tuple[str, list]:
        data = unit.data
        ind = sx.line_indent(data, p.loop.start_byte)[0].decode()
        i1, i2, i3 = ind + "    ", ind + "        ", ind + "            "
        t, vec, j, lane, step = p.ctype, p.vec, p.j, p.lane, p.step
        n = f"({sx.text(p.bound)})"
        A, M, S, E, V = (f"{PREFIX}_{x}" for x in "amsev")
        body = p.loop.child_by_field_name("body")
        helpers = []
        step_vec = p.step_vec
        if body.type == "compound_statement":
            scalar_body = " " + reindent(sx.text(body), ind, i2)
        else:
            scalar_body = "\n" + i3 + reindent(sx.text(body), ind + "    ", i3)

        def addr(s: _Stream, at: str) -> str:
            x = s.accesses[0]
            text = sx.render(x.node, data, lambda nd: at.encode() if (nd.start_byte, nd.end_byte) == (x.j_node.start_byte, x.j_node.end_byte) else None).decode()
            if x.node.type == "subscript_expression":
                return f"&{text}"
            return f"({_first_arg_text(x, at, data)})"

        mixed = len({s.elem_size for s in p.streams}) > 1
        what = "16-byte loads and stores" if not mixed else "16 bytes a load and store of the widest buffers, 8 of the others"
        lines = [f"{ind}{{  // {vec} elements per lane and step: {what} (transform vector_loops)",
                 f"{i1}const {t} {A} = ({p.start});  // the loop's first element"]
        if p.proven:
            lines += [f"{i1}if ({A} < {n}) {{  // every buffer 16-byte aligned at {A} (spec: align, constraints)",
                      f"{i2}const {t} {S} = {A};"]
        else:
            if len({s.elem_size for s in p.streams}) == 1:  # one element size: offsets within 16 bytes
                phase = lambda s: f"(reinterpret_cast<unsigned long long>({addr(s, A)}) & 15ull)"  # noqa: E731
                first = f"(unsigned){phase(p.streams[0])}"
                what = "the same offset within 16 bytes for every buffer: vectorise"
                head = f"({t})(((16u - {M}) & 15u) / {p.size}u);  // the first element on a 16-byte boundary"
            else:  # mixed element sizes: each buffer's chunk is VEC of its elements, so compare offsets in elements
                phase = lambda s: f"(unsigned)((reinterpret_cast<unsigned long long>({addr(s, A)}) / {s.elem_size}ull) & {vec - 1}ull)"  # noqa: E731
                first = phase(p.streams[0])
                what = f"every buffer at the same offset within its {vec}-element chunks: vectorise"
                head = f"({t})(({vec}u - {M}) & {vec - 1}u);  // the first element on every buffer's chunk boundary"
            same = "".join(f" && {phase(s)} == {M}" for s in p.streams[1:])
            if not same:  # one buffer: the test is only that the range is not empty
                what = "a non-empty range: vectorise from its first 16-byte boundary"
            lines += [f"{i1}const unsigned {M} = {first};",
                      f"{i1}if ({A} < {n}{same}) {{  // {what}",
                      f"{i2}const {t} {S} = {A} + {head}",
                      f"{i2}// the head, element by element",
                      f"{i2}for ({t} {j} = {A} + {lane}; {j} < {S} && {j} < {n}; {j} += {step}){scalar_body}"]
        lines.append(f"{i2}const {t} {E} = {S} < {n} ? ({t})({S} + ({n} - {S}) / {vec} * {vec}) : {S};  // the end of the whole 16-byte chunks")
        if p.pragma is not None:
            lines.append(f"{sx.text(p.pragma).strip()}")
        vt = p.vtype or t
        start_v = f"{S} + ({t})({lane}) * {vec}" if vt == t else f"({vt}){S} + ({vt})({lane}) * {vec}"
        lines.append(f"{i2}for ({vt} {V} = {start_v}; {V} < {E}; {V} += {step_vec}) {{")
        # loads
        chunk = {}
        for k, s in enumerate(p.streams):
            cname = f"{PREFIX}_c{k}"
            chunk[id(s)] = cname
            if not s.loaded:
                continue
            hint = next((x.hint for x in s.accesses if x.kind == "read" and x.hint), None)
            ctype = CHUNKS[s.elem_size * vec]
            lines.append(f"{i3}const {ctype} {cname} = {vector_load(hint, ctype, addr(s, V), helpers)};")
        for s in p.streams:
            if s.written:
                cname = chunk[id(s)]
                decls = [f"{cname}_{k}" + (f" = {_unpack(s.elem, cname, k, vec)}" if s.loaded else "") for k in range(vec)]
                lines.append(f"{i3}{s.elem} " + ", ".join(decls) + ";")
        # the body, once per element
        replace = {}
        for s in p.streams:
            for x in s.accesses:
                replace[(x.node.start_byte, x.node.end_byte)] = (s, x)
        for k in range(vec):
            def element(nd: Node, k=k) -> bytes | None:
                hit = replace.get((nd.start_byte, nd.end_byte))
                if hit is None:
                    return None
                s, x = hit
                cname = chunk[id(s)]
                if x.kind == "store":
                    return f"{cname}_{k} = ({s.elem})({sx.render(x.value, data, element).decode()})".encode()
                if s.written:
                    return f"{cname}_{k}".encode()
                return f"({_unpack(s.elem, cname, k, vec)})".encode()

            copy = sx.render(body, data, element).decode()
            if body.type == "compound_statement":
                copy = copy[1:-1].strip()
            lines.append(f"{i3}{{  // element {k}")
            if p.uses_j:
                lines.append(f"{i3}    const {t} {j} = {V} + {k};" if vt == t else f"{i3}    const {t} {j} = ({t})({V} + {k});")
            lines.append(f"{i3}    {reindent(copy, ind + '    ', i3 + '    ')}")
            lines.append(f"{i3}}}")
        # stores
        for s in p.streams:
            if not s.written:
                continue
            cname = chunk[id(s)]
            bits = ELEMENTS[s.elem][2]
            if s.elem_size == 4:
                words = [bits.format(f"{cname}_{k}") for k in range(vec)]
            else:
                words = [f"{bits.format(f'{cname}_{2 * w}')} | ({bits.format(f'{cname}_{2 * w + 1}')} << 16)" for w in range(vec // 2)]
            ctype = CHUNKS[s.elem_size * vec]
            value = f"make_{ctype}(" + ", ".join(words) + ")"
            ptr = f"reinterpret_cast<{ctype}*>({addr(s, V)})"
            store_hint = next((sx.call_name(x.node) for x in s.accesses if x.kind == "store"), None)
            lines.append(f"{i3}{store_hint}({ptr}, {value});" if store_hint else f"{i3}*{ptr} = {value};")
        lines.append(f"{i2}}}")
        lines.append(f"{i2}// the tail, element by element")
        lines.append(f"{i2}for ({t} {j} = {E} + {lane}; {j} < {n}; {j} += {step}){scalar_body}")
        if p.proven:
            lines.append(f"{i1}}}")
        else:
            lines.append(f"{i1}}} else {{  // " + ("the buffers' offsets within 16 bytes differ (or the range is empty): the "
                         "original loop" if len(p.streams) > 1 else "an empty range: the original loop (no iteration)"))
            lines.append(f"{i2}{reindent(sx.text(p.loop), ind, i2)}")
            lines.append(f"{i1}}}")
        lines.append(f"{ind}}}")
        return "\n".join(lines)[len(ind):], helpers


# -- the analysis of one kernel -------------------------------------------------------------------------------


class LoopAnalysis:
    """Facts about one kernel the loop checks share: declarations, pointers, uniform names, the spec's divisors."""

    def __init__(self, unit: Unit):
        self.unit = unit
        fn, body = unit.fn, unit.body
        self.declared: dict[str, int] = {}
        self.inits: dict[str, Node] = {}
        self.ptr_names: set[str] = set(unit.pointers)
        self.arrays: set[str] = set()
        for n in sx.walk(fn):
            if n.type not in ("declaration", "parameter_declaration"):
                continue
            for d in n.children_by_field_name("declarator"):
                ident = sx.innermost_identifier(d)
                if ident is None:
                    continue
                name = sx.text(ident)
                self.declared[name] = self.declared.get(name, 0) + 1
                inner = d.child_by_field_name("declarator") if d.type == "init_declarator" else d
                if inner is not None and inner.type == "pointer_declarator":
                    self.ptr_names.add(name)
                elif inner is not None and inner.type == "array_declarator":
                    self.arrays.add(name)
                if d.type == "init_declarator":
                    self.inits[name] = d.child_by_field_name("value")
        self.written = sx.written_names(fn)
        self.maybe_written = sx.maybe_written_names(fn)  # (also through a reference or a call: a lane's or stride's local)
        self.roots = pointer_roots(unit)
        self.offsets = pointer_offsets(unit, self.roots)
        self.constants = row_constants(body)
        self.written_roots = self._written_roots()
        self.block = unit.block_threads() if unit.block_is_1d() else None
        self._memo: dict[str, bool] = {}
        self.group_size: int | None = None  # C for the loop under study when its group is C lanes (not a block)
        self.cluster: int | None = None  # C for the loop under study when its group is a cluster of C blocks (rowpar_cluster)
        self.grid = False  # the loop under study is a grid-stride loop: its group is the grid

    def _written_roots(self) -> set[str] | None:
        """Buffers (by root) the kernel writes anywhere; None when a write's target is unknown."""
        out = set()
        for n in sx.walk(self.unit.body):
            target = None
            if n.type == "assignment_expression":
                target = n.child_by_field_name("left")
            elif n.type == "update_expression":
                target = n.child_by_field_name("argument")
            elif n.type == "call_expression":
                name = sx.call_name(n) or ""
                if name in LOAD_FUNCS or name in PURE_FUNCS or name.startswith("ptxf_ldna_"):
                    continue
                bases = {sx.text(i) for x in sx.call_args(n) for i in sx.walk(x)  # pointers passed, not elements read
                         if sx.is_ident(i) and sx.text(i) in self.ptr_names and not _element_value(i)}
                if name.startswith("atomic") or name in STORE_FUNCS or bases:
                    if any(b not in self.roots for b in bases):
                        return None
                    out |= {self.roots[b] for b in bases}
                continue
            t = sx.unparen(target)
            while t is not None and t.type == "field_expression":
                t = sx.unparen(t.child_by_field_name("argument"))
            if t is None or t.type == "identifier":
                continue
            base = None
            if t.type == "subscript_expression":
                base = sx.uncast(t.child_by_field_name("argument"))
            elif t.type == "pointer_expression":
                ids = sx.identifiers(t) & self.ptr_names
                if len(ids) != 1:
                    return None
                out.add(self.roots.get(ids.pop(), "?"))
                continue
            if not sx.is_ident(base):
                return None
            name = sx.text(base)
            if name in self.arrays:
                continue
            if name not in self.roots:
                return None
            out.add(self.roots[name])
        return out

    # lanes and groups --------------------------------------------------------------------------------------

    def lane_group(self, node: Node, depth: int = 0) -> int | str | None:
        """``"block"`` when ``node`` is ``threadIdx.x`` (or a lane variable equal to it), C for a variable
        ``threadIdx.x % C`` / ``threadIdx.x & (C - 1)``, a :class:`ClusterGroup` for a cluster's lane (or a copy of
        one of these); None otherwise."""
        node = sx.uncast(node)
        if sx.is_builtin(node, "threadIdx", "x"):
            return "block"
        if not sx.is_ident(node):
            return None
        name = sx.text(node)
        if self.declared.get(name) != 1 or name in self.written or name not in self.inits:
            return None
        v = sx.uncast(self.inits[name])
        if sx.is_builtin(v, "threadIdx", "x"):
            return "block"
        if sx.is_ident(v) and sx.text(v) != name and depth < 4:
            return self.lane_group(v, depth + 1)  # a copy of a lane (``int tid = ptxf_lane;``) is that lane
        if sx.is_builtin(v, "threadIdx", "y") and name == LANE:
            return "column"  # colpar's lane: a column's threads along y (hold_row takes its loops; no 16-byte step)
        cluster = _cluster_lane(v, self.block)
        if cluster is not None:
            return cluster
        if v is None or v.type != "binary_expression" or not sx.is_builtin(v.child_by_field_name("left"), "threadIdx", "x"):
            return None
        c = sx.unparen(v.child_by_field_name("right"))
        value = sx.literal_value(c) if sx.is_number(c) else None
        if not isinstance(value, int) or value <= 0:
            return None
        if sx.operator(v) == "%":
            group = value
        elif sx.operator(v) == "&" and value & (value + 1) == 0:
            group = value + 1
        else:
            return None
        if self.block is None or self.block % group:
            return None
        return group

    def step_matches(self, group, step: Node) -> bool:
        """The step is the group's size: ``blockDim.x`` (or the literal block) for a block, C for a group of C."""
        v = sx.literal_value(sx.unparen(step)) if sx.is_number(step) else None
        if isinstance(group, ClusterGroup):
            return v == group.lanes
        if group == "block":
            return sx.is_builtin(step, "blockDim", "x") or (v is not None and v == int_literal(self.unit.launch.block[0]))
        return v == group

    def grid_lane(self, terms: list[Node], step: Node | None) -> list[Node] | None:
        """The terms of a loop's start that are the thread's index in a 1-D grid (``blockIdx.x * blockDim.x`` and
        ``threadIdx.x``, or one local equal to their sum) where the step is the grid's size (``gridDim.x *
        blockDim.x``, or a local equal to it): a grid-stride loop, whose group is every thread of the grid. None
        otherwise (or for a launch of more than one dimension)."""
        if step is None or not self.unit.block_is_1d() or len(self.unit.launch.grid) != 1 \
                or self._value_poly(step) != GRID_SIZE:
            return None
        for t in terms:
            if self._value_poly(t) == GRID_INDEX:
                return [t]
        polys = [(t, poly(t)) for t in terms]
        tid = [t for t, q in polys if q == {("threadIdx.x",): 1}]
        bid = [t for t, q in polys if q == {("blockDim.x", "blockIdx.x"): 1}]
        return [bid[0], tid[0]] if len(tid) == 1 and len(bid) == 1 else None

    def lane_reads(self, body: Node, j: str, written: set[str], extra: set[str]) -> str | None:
        """A name or builtin the loop's body reads whose value differs between the lanes of the group (``threadIdx.x``,
        for a grid ``blockIdx.x``, a local computed from them such as the thread's global index), other than the loop's
        index, the body's own locals and what it accumulates; None when there is none. Call after
        :meth:`context_uniform` (which sets the group)."""
        local = sx.declared_names(body)
        for n in sx.walk(body):
            if _thread_builtin(n):
                if not self.uniform(n, extra):
                    return sx.text(n)
            elif sx.is_ident(n) and (n.parent is None or n.parent.type != "field_expression"):
                name = sx.text(n)
                if name == j or name in local or name in written or name in extra or name not in self.inits:
                    continue
                if self._reads_thread(name) and not self.uniform(n, extra):
                    return name
        return None

    def _reads_thread(self, name: str, depth: int = 0) -> bool:
        """The local ``name``'s value reads ``threadIdx``/``blockIdx``, directly or through other locals."""
        init = self.inits.get(name)
        if init is None or depth > 16:
            return False
        for m in sx.walk(init):
            if _thread_builtin(m):
                return True
            if sx.is_ident(m) and sx.text(m) != name and self._reads_thread(sx.text(m), depth + 1):
                return True
        return False

    def _value_poly(self, node: Node | None) -> Poly | None:
        """``node`` as a polynomial over the builtins, through one local declared once and never written."""
        node = sx.uncast(node)
        if sx.is_ident(node):
            name = sx.text(node)
            if self.declared.get(name) != 1 or name in self.maybe_written or name not in self.inits:
                return None
            node = self.inits[name]
        return poly(node)

    # uniformity ----------------------------------------------------------------------------------------------

    def uniform(self, node: Node | None, extra: set[str] = frozenset()) -> bool:
        """``node`` has the same value on every lane of the group (see the module docstring)."""
        node = sx.unparen(node)
        if node is None:
            return False
        t = node.type
        if t in ("number_literal", "true", "false", "char_literal", "sizeof_expression", "null"):
            return True
        if t == "identifier":
            name = sx.text(node)
            if name in extra:
                return True
            if name in self._memo:
                return self._memo[name]
            self._memo[name] = False  # cycles are not uniform
            ok = self.declared.get(name) == 1 and name not in self.written and (
                name not in self.inits and self._is_param(name) or name in self.inits and self.uniform(self.inits[name], extra))
            self._memo[name] = ok
            return ok
        if t == "field_expression":
            if self.grid:  # (the grid's threads are the lanes: only the launch's sizes are theirs alike)
                return any(sx.is_builtin(node, v, f) for v in ("blockDim", "gridDim") for f in "xyz")
            if self.cluster is not None and sx.is_builtin(node, "blockIdx", "x"):
                return False  # (a cluster's blocks are its lanes: their x indices differ)
            if self.group_size is None and any(sx.is_builtin(node, "threadIdx", f) for f in "yz"):
                return True  # the group is the threads of one (y, z) of the block: threadIdx.x its lanes
            return any(sx.is_builtin(node, v, f) for v in ("blockIdx", "blockDim", "gridDim") for f in "xyz")
        if t == "cast_expression":
            return self.uniform(node.child_by_field_name("value"), extra)
        if t == "unary_expression":
            return self.uniform(node.child_by_field_name("argument"), extra)
        if t == "binary_expression":
            if self._group_quotient(node, extra):
                return True
            if self.cluster is not None and sx.operator(node) == "/" and sx.is_builtin(
                    sx.unparen(node.child_by_field_name("left")), "blockIdx", "x"):  # (no cast: a narrowing one wraps)
                d = sx.unparen(node.child_by_field_name("right"))
                dv = sx.literal_value(d) if sx.is_number(d) else None
                return isinstance(dv, int) and dv > 0 and dv % self.cluster == 0  # the cluster's row
            return self.uniform(node.child_by_field_name("left"), extra) and self.uniform(node.child_by_field_name("right"), extra)
        if t == "conditional_expression":
            return all(self.uniform(node.child_by_field_name(f), extra) for f in ("condition", "consequence", "alternative"))
        if t == "subscript_expression":
            idx = [c for c in node.child_by_field_name("indices").named_children if c.type != "comment"]
            return len(idx) == 1 and self._uniform_element(node.child_by_field_name("argument"), idx[0], extra)
        if t == "call_expression":
            if sx.call_name(node) in LOAD_FUNCS:  # __ldg(p + E) or __ldg(p): p[E] read through a cache hint
                args = sx.call_args(node)
                a = sx.unparen(args[0]) if len(args) == 1 else None
                if a is not None and a.type == "binary_expression" and sx.operator(a) == "+":
                    return self._uniform_element(a.child_by_field_name("left"), a.child_by_field_name("right"), extra)
                return a is not None and self._uniform_element(a, None, extra)
            return sx.call_name(node) in PURE_FUNCS and all(self.uniform(x, extra) for x in sx.call_args(node))
        return False

    def _uniform_element(self, ptr: Node | None, index: Node | None, extra: set[str]) -> bool:
        """``ptr[index]`` (``*ptr`` for None) is the same for every lane: ``ptr`` a pointer into a buffer the kernel never
        writes, both uniform."""
        ptr = sx.uncast(ptr)
        return (sx.is_ident(ptr) and self.written_roots is not None and sx.text(ptr) in self.roots
                and self.roots[sx.text(ptr)] not in self.written_roots and self.uniform(ptr, extra)
                and (index is None or self.uniform(index, extra)))

    def _is_param(self, name: str) -> bool:
        decl = sx.function_declarator(self.unit.fn)
        return name in sx.declared_names(decl)

    def _group_quotient(self, node: Node, extra: set[str]) -> bool:
        """``(blockIdx.x * blockDim.x + threadIdx.x) / D``: the same on each aligned group of C lanes when C divides D
        and D the block (the row index rowpar writes)."""
        if sx.operator(node) != "/" or self.block is None or self.group_size is None:
            return False
        d = sx.unparen(node.child_by_field_name("right"))
        dv = sx.literal_value(d) if sx.is_number(d) else None
        if not isinstance(dv, int) or dv <= 0 or dv % self.group_size or self.block % dv:
            return False
        p = poly(node.child_by_field_name("left"))
        if p is None or p.get(("threadIdx.x",)) != 1:
            return False
        for m, c in p.items():
            if m == ("threadIdx.x",):
                continue
            coeff = c
            for name in m:
                if name == "blockDim.x":
                    coeff *= self.block
                elif name in ("blockIdx.x", "blockIdx.y", "blockIdx.z", "gridDim.x", "gridDim.y", "gridDim.z"):
                    continue
                elif not (name.isidentifier() and self.uniform(_ident(name), extra)):
                    return False
            if coeff % dv:
                return False
        return True

    def uniform_pointer(self, name: str, extra: set[str] = frozenset()) -> bool:
        """The pointer ``name`` is the same on every lane of the group (a parameter never written, or a local pointer
        built from uniform values and the enclosing loops' variables ``extra``)."""
        return name in self.unit.pointers and name not in self.written or self.uniform(_ident(name), extra)

    def context_uniform(self, loop: Node) -> set[str]:
        """The loop is reached by every lane of its group (enclosing conditions and loop headers uniform, no return
        before it on a non-uniform path). Returns the enclosing loops' variables (uniform there). Raises Refused."""
        group = self.lane_group_of(loop)
        self.group_size = group if isinstance(group, int) else None
        self.cluster = group.blocks if isinstance(group, ClusterGroup) else None
        self.grid = group == GRID
        self._memo.clear()
        extra: set[str] = set()
        chain = []
        child, parent = loop, loop.parent
        while parent is not None and parent != self.unit.fn:
            chain.append((child, parent))
            child, parent = parent, parent.parent
        for child, parent in reversed(chain):  # outermost first, so inner headers may use outer loop variables
            if parent.type in ("compound_statement", "else_clause", "expression_statement"):
                continue
            if parent.type == "if_statement":
                if not self.uniform(_condition(parent), extra):
                    raise Refused(f"inside a condition not the same for the whole group (line {parent.start_point[0] + 1})")
                continue
            if parent.type == "for_statement" and child == parent.child_by_field_name("body"):
                var = self._uniform_header(parent, extra)
                if var is None:
                    raise Refused(f"inside a loop whose header is not the same for the whole group (line {parent.start_point[0] + 1})")
                extra.add(var)
                continue
            raise Refused(f"inside a {parent.type}")
        for n in sx.walk(self.unit.body):
            if n.type == "goto_statement":
                raise Refused("goto in the kernel")
            if n.type == "return_statement" and n.start_byte < loop.start_byte and not sx.in_lambda(n):
                p = n.parent
                while p is not None and p != self.unit.fn:
                    if p.type == "if_statement":
                        if not self.uniform(_condition(p), extra):
                            raise Refused(f"a return before the loop under a condition not the same for the whole group (line {n.start_point[0] + 1})")
                    elif p.type not in ("compound_statement", "else_clause"):
                        raise Refused(f"a return before the loop inside a {p.type}")
                    p = p.parent
        return extra

    def lane_group_of(self, loop: Node):
        init = loop.child_by_field_name("initializer")
        ds = init.children_by_field_name("declarator") if init is not None and init.type == "declaration" else []
        if len(ds) != 1 or ds[0].type != "init_declarator":
            return None
        terms = plus_terms(ds[0].child_by_field_name("value"))
        if self.grid_lane(terms, _step_of(loop)) is not None:
            return GRID
        for t in terms:
            g = self.lane_group(t)
            if g is not None:
                return g
        return None

    def _uniform_header(self, loop: Node, extra: set[str]) -> str | None:
        init, cond, upd, body = (loop.child_by_field_name(f) for f in ("initializer", "condition", "update", "body"))
        if init is None or init.type != "declaration" or cond is None or upd is None:
            return None
        ds = init.children_by_field_name("declarator")
        if len(ds) != 1 or ds[0].type != "init_declarator" or not sx.is_ident(ds[0].child_by_field_name("declarator")):
            return None
        var = sx.text(ds[0].child_by_field_name("declarator"))
        inner = extra | {var}
        if not self.uniform(ds[0].child_by_field_name("value"), extra) or not self.uniform(cond, inner):
            return None
        u = sx.unparen(upd)
        if u.type == "update_expression":
            ok = sx.is_ident(sx.unparen(u.child_by_field_name("argument")), var)
        elif u.type == "assignment_expression":
            ok = sx.is_ident(sx.unparen(u.child_by_field_name("left")), var) and self.uniform(u.child_by_field_name("right"), inner)
        else:
            ok = False
        if not ok or (body is not None and var in sx.written_names(body)):
            return None
        if body is not None and sx.contains_type(body, ("break_statement", "continue_statement", "return_statement", "goto_statement")):
            return None
        return var

    def inside_rewrite(self, loop: Node) -> bool:
        """The loop is one this pass wrote (its head, tail or fallback: under a condition on its variables)."""
        p = loop.parent
        while p is not None:
            if p.type == "if_statement" and any(i.startswith(PREFIX) for i in sx.identifiers(_condition(p))):
                return True
            p = p.parent
        return False

    # elements and alignment -----------------------------------------------------------------------------------

    def element(self, name: str) -> str | None:
        e = self.unit.types.element.get(name)
        if e is None:
            return None
        e = " ".join(w for w in e.split() if w not in ("const", "volatile", "__restrict__"))
        return e if e in ELEMENTS else None

    def aligned(self, s: _Stream, start_terms: list[Node], vec: int) -> bool:
        """The spec proves ``&p[base + a]`` 16-byte aligned: the buffer's ``align`` >= 16 and the element offset a multiple of VEC."""
        root = self.roots.get(s.ptr)
        arg = next((x for x in self.unit.spec.args if x.name == root), None)
        if arg is None or (arg.align or 0) < VEC_BYTES or s.ptr not in self.offsets:
            return False
        total: Poly = dict(self.offsets[s.ptr])
        for t in s.base_terms + start_terms:
            if _narrowing(t):
                return False
            p = poly(t, self.constants)
            if p is None:
                return False
            total = add(total, p)
        divisors = self._divisors()
        for m, c in total.items():
            f = c
            for name in m:
                f *= divisors.get(name, 1)
            if f % vec:
                return False
        return True

    def _divisors(self) -> dict[str, int]:
        """Scalar parameters -> a number their value is always a multiple of (a literal value, or a size symbol's
        ``S % d == 0`` constraint)."""
        spec = self.unit.spec
        by_symbol: dict[str, int] = {}
        for c in spec.constraints:
            try:
                tree = ast.parse(c.strip(), mode="eval").body
            except SyntaxError:
                continue
            for sym, d in _mod_facts(tree):
                by_symbol[sym] = max(by_symbol.get(sym, 1), d)
        out = {}
        for a in spec.args:
            if a.role != "scalar" or a.name in self.written:
                continue
            v = a.value
            if isinstance(v, int) and not isinstance(v, bool) and v != 0:
                out[a.name] = abs(v)
            elif isinstance(v, str) and v.strip() in by_symbol:
                out[a.name] = by_symbol[v.strip()]
        return out


# -- helpers on the syntax tree -------------------------------------------------------------------------------


def _mod_facts(tree) -> list[tuple[str, int]]:
    """``S % d == 0`` facts in a constraint (``and`` of comparisons)."""
    if isinstance(tree, ast.BoolOp) and isinstance(tree.op, ast.And):
        return [f for v in tree.values for f in _mod_facts(v)]
    if isinstance(tree, ast.Compare) and len(tree.ops) == 1 and isinstance(tree.ops[0], ast.Eq):
        left, right = tree.left, tree.comparators[0]
        if isinstance(left, ast.Constant):
            left, right = right, left
        if (isinstance(right, ast.Constant) and right.value == 0 and isinstance(left, ast.BinOp) and isinstance(left.op, ast.Mod)
                and isinstance(left.left, ast.Name) and isinstance(left.right, ast.Constant) and isinstance(left.right.value, int)
                and left.right.value > 0):
            return [(left.left.id, left.right.value)]
    return []


def declared_index(loop: Node) -> tuple[str, str, Node] | str:
    """``(type, name, initial value)`` of the one index a ``for`` loop with a condition, an update and a body declares
    (``for (T j = a; ...; ...)``), else why not."""
    init = loop.child_by_field_name("initializer")
    if init is None or init.type != "declaration" or any(loop.child_by_field_name(f) is None for f in ("condition", "update", "body")):
        return "not a for loop declaring its index"
    ds = init.children_by_field_name("declarator")
    if len(ds) != 1 or ds[0].type != "init_declarator" or not sx.is_ident(ds[0].child_by_field_name("declarator")):
        return "not one index declared"
    return sx.type_text(init.child_by_field_name("type")), sx.text(ds[0].child_by_field_name("declarator")), ds[0].child_by_field_name("value")


def _any_flag(unit: Unit, loop: Node, name: str) -> bool:
    """``name`` is atomic_agg's flag (``ptxf_hit0 = true;`` in the loop, read only by ``__ballot_sync`` after it: does any
    lane of the warp hold a part to add): order-free, whichever lane runs which iterations."""
    if not name.startswith("ptxf_hit"):
        return False
    body = loop.child_by_field_name("body")
    for n in sx.walk(unit.body):
        if not sx.is_ident(n, name) or sx.in_lambda(n):
            continue
        p = n.parent
        inside = body.start_byte <= n.start_byte < body.end_byte
        if p is not None and p.type == "assignment_expression" and sx.unparen(p.child_by_field_name("left")) == n:
            if not inside or sx.operator(p) != "=" or p.child_by_field_name("right").type != "true":
                return False
            continue
        if p is not None and p.type == "init_declarator" and p.child_by_field_name("declarator") == n:
            continue
        call = p.parent if p is not None and p.type == "argument_list" else None
        if inside or call is None or sx.call_name(call) != "__ballot_sync":
            return False
        test = call.parent  # atomic_agg's `if (__ballot_sync(lanes, hit) != 0u)`: only whether any lane has a part
        if test is None or test.type != "binary_expression" or sx.operator(test) != "!=" \
                or sx.text(test.child_by_field_name("right")) not in ("0u", "0") or test.parent is None \
                or test.parent.type != "condition_clause":
            return False
    return True


def _step_of(loop: Node) -> Node | None:
    """``L`` of a loop's ``j += L`` step, else None."""
    u = sx.unparen(loop.child_by_field_name("update"))
    if u is None or u.type != "assignment_expression" or sx.operator(u) != "+=":
        return None
    return sx.unparen(u.child_by_field_name("right"))


def plus_terms(node: Node | None) -> list[Node]:
    """The terms of a ``+`` chain (parentheses looked through, casts kept)."""
    node = sx.unparen(node)
    if node is None:
        return []
    if node.type == "binary_expression" and sx.operator(node) == "+":
        return plus_terms(node.child_by_field_name("left")) + plus_terms(node.child_by_field_name("right"))
    return [node]


def _exclusive(a: Node, b: Node) -> bool:
    """``a`` and ``b`` sit on the two branches of one ``if`` (hold_row's register path and its loops as written): a
    thread runs one or the other."""
    p = a.parent
    while p is not None:
        if p.type == "if_statement":
            cons, alt = p.child_by_field_name("consequence"), p.child_by_field_name("alternative")
            inside = lambda n, x: x is not None and x.start_byte <= n.start_byte and n.end_byte <= x.end_byte  # noqa: E731
            if (inside(a, cons) and inside(b, alt)) or (inside(a, alt) and inside(b, cons)):
                return True
        p = p.parent
    return False


def _narrowing(node: Node) -> bool:
    """``node`` holds a cast to anything but a 64-bit integer (``(unsigned char)N``, ``(int)x``, ``(float)``): its value
    may differ from the polynomial :func:`.affine.poly` reads through the cast."""
    return any(c.type == "cast_expression" and sx.type_text(c.child_by_field_name("type")) not in sx.WIDE_INT_TYPES
               for c in sx.walk(node))


def _key(terms: list[Node]) -> tuple:
    """A key for ``base`` (the terms besides ``j``): its polynomial, else (a narrowing cast in it) its terms' texts."""
    total: Poly | None = {} if not any(_narrowing(t) for t in terms) else None
    for t in terms if total is not None else ():
        p = poly(t)
        if p is None:
            total = None
            break
        total = add(total, p)
    if total is not None:
        return ("poly", tuple(sorted(total.items())))
    return ("text", tuple(sorted(" ".join(sx.text(t).split()) for t in terms)))


def access_of(ident: Node) -> tuple[Node, list[Node], str, str | None, Node | None] | None:
    """How a pointer name is used: ``(node, index terms, kind, hint, stored value)``, or None for another use.

    ``p[idx]``: terms of ``idx``; kind ``read``, ``write`` (``=``) or ``update`` (``op=``);
    ``f(p + idx)`` with a load hint: ``read``; ``__stcs(p + idx, v)``: ``store``.
    """
    parent = ident.parent
    if parent.type == "subscript_expression" and parent.child_by_field_name("argument") == ident:
        idx = [c for c in parent.child_by_field_name("indices").named_children if c.type != "comment"]
        if len(idx) != 1:
            return None
        kind = access_kind(parent)
        if kind == "reads":
            return parent, plus_terms(idx[0]), "read", None, None
        if kind != "writes":
            return None
        assign = parent.parent
        if assign.type != "assignment_expression" or assign.child_by_field_name("left") != parent:
            return None
        return parent, plus_terms(idx[0]), "write" if sx.operator(assign) == "=" else "update", None, None
    # p + idx as the first argument of a hint call
    top = ident
    while top.parent is not None and (top.parent.type == "parenthesized_expression"
                                      or (top.parent.type == "binary_expression" and sx.operator(top.parent) == "+")):
        top = top.parent
    args = top.parent
    if args is None or args.type != "argument_list":
        return None
    call = args.parent
    name = sx.call_name(call) or ""
    cargs = sx.call_args(call)
    if not cargs or cargs[0] != top:
        return None
    terms = plus_terms(top)
    if sum(1 for t in terms if t == ident) != 1:
        return None
    rest = [t for t in terms if t != ident]
    if (name in HINT_LOADS or name.startswith("ptxf_ldna_")) and len(cargs) == 1:
        return call, rest, "read", name, None
    if name in HINT_STORES and len(cargs) == 2 and call.parent.type == "expression_statement":
        return call, rest, "store", name, cargs[1]
    return None


def _drop_neighbours(streams: list[_Stream], scalar_roots: list, roots: dict) -> list[_Stream]:
    """Read-only streams a constant number of elements (not a multiple of VEC) from another stream of the same pointer
    (``x[j - 1]``, ``x[j + 1]`` beside ``x[j]``) stay scalar loads: their addresses can never share the other's
    offset within 16 bytes, so the runtime check would always fail. The stream kept is the one with the most accesses."""
    vec = VEC_BYTES // max(ELEMENTS[s.elem][0] for s in streams)
    keep = []
    for s in sorted(streams, key=lambda s: (-len(s.accesses), s.accesses[0].node.start_byte)):
        near = None
        for k in keep:
            d = _constant_difference(k, s)
            if k.ptr == s.ptr and d is not None and d % vec:
                near = k
        if near is not None and not s.written:
            scalar_roots.append(roots.get(s.ptr))
            continue
        keep.append(s)
    return sorted(keep, key=lambda s: s.accesses[0].node.start_byte)


def _constant_difference(a: _Stream, b: _Stream) -> int | None:
    pa, pb = _key(a.base_terms), _key(b.base_terms)
    if pa[0] != "poly" or pb[0] != "poly":
        return None
    d = add(dict(pb[1]), {m: -c for m, c in pa[1]})
    return d.get((), 0) if all(m == () for m in d) else None


def _trip(start_terms: list[Node], bound: Node) -> Poly | None:
    """The loop's trip ``n - a`` as a polynomial (None when either is not one)."""
    total: Poly | None = poly(bound)
    for t in start_terms:
        p = poly(t)
        if total is None or p is None:
            return None
        total = add(total, {m: -c for m, c in p.items()})
    return total


def _disjoint(a: "LoopAnalysis", s: _Stream, t: _Stream, trip: Poly | None) -> bool:
    """The element ranges ``[base + a, base + n)`` of two streams of one buffer never overlap, at any value of the
    sizes: their bases differ by at least the trip ``n - a`` (``v[i]`` and ``v[i + half]`` over ``i < half``)."""
    if trip is None:
        return False
    bs, bt = _base_poly(s.base_terms), _base_poly(t.base_terms)
    if bs is None or bt is None:
        return False
    if s.ptr != t.ptr:  # two names into one buffer: compare from the buffer's start
        if s.ptr not in a.offsets or t.ptr not in a.offsets:
            return False
        bs, bt = add(bs, a.offsets[s.ptr]), add(bt, a.offsets[t.ptr])
    d = add(bt, {m: -c for m, c in bs.items()})
    for gap in (d, {m: -c for m, c in d.items()}):
        rest = add(gap, {m: -c for m, c in trip.items()})
        if all(m == () for m in rest) and rest.get((), 0) >= 0:
            return True
    return False


def _base_poly(terms: list[Node]) -> Poly | None:
    if any(_narrowing(t) for t in terms):
        return None
    total: Poly = {}
    for t in terms:
        p = poly(t)
        if p is None:
            return None
        total = add(total, p)
    return total


def _first_arg_text(x: _Access, at: str, data: bytes) -> str:
    arg = sx.call_args(x.node)[0]
    return sx.render(arg, data, lambda nd: at.encode() if (nd.start_byte, nd.end_byte) == (x.j_node.start_byte, x.j_node.end_byte) else None).decode()


def _thread_builtin(n: Node) -> bool:
    """``n`` is ``threadIdx`` or ``blockIdx`` of any axis."""
    return n.type == "field_expression" and any(sx.is_builtin(n, v, f) for v in ("threadIdx", "blockIdx") for f in "xyz")


def _shared(a: "LoopAnalysis", o: Node, mine: set, mine_written: set, elements_only: bool) -> set:
    """The buffers (roots) that code ``o`` writes among ``mine`` (what a loop touches), or touches among
    ``mine_written`` (what it writes); ``elements_only``: count only element accesses as touching (a straight-line
    statement's pointer arithmetic reads no element). Raises Refused where ``o`` writes a buffer it cannot name."""
    try:
        o_written = written_roots(o, a.roots, a.arrays)
    except RowRefused:
        raise Refused(f"line {o.start_point[0] + 1} writes a buffer it cannot name") from None
    o_touched = {a.roots.get(sx.text(n)) for n in sx.walk(o) if n.type == "identifier" and sx.text(n) in a.roots
                 and (not elements_only or access_of(n) is not None)}
    return (mine & o_written) | (mine_written & o_touched)


def _in_loop(node: Node, body: Node) -> bool:
    """``node`` sits inside a loop of the kernel body ``body`` (or is one)."""
    p = node
    while p is not None and p != body:
        if p.type in sx.LOOPS:
            return True
        p = p.parent
    return False


def _unconditional(node: Node, body: Node) -> bool:
    """``node`` runs on every iteration of the loop whose body is ``body``: not in a branch of an ``if``, a ``?:``, a
    ``switch`` or the right side of ``&&``/``||`` within it."""
    child, p = node, node.parent
    while p is not None and child != body:
        if p.type == "conditional_expression" and child != p.child_by_field_name("condition"):
            return False
        if p.type == "if_statement" and child != p.child_by_field_name("condition"):
            return False
        if p.type in ("switch_statement", "case_statement"):
            return False
        if p.type == "binary_expression" and sx.operator(p) in ("&&", "||") and child == p.child_by_field_name("right"):
            return False
        child, p = p, p.parent
    return True


def _top_level_statement(node: Node, body: Node) -> bool:
    """``node`` (a store target or a store call) is the whole left side / call of a top-level statement of ``body``."""
    stmt = node.parent
    if stmt is not None and stmt.type == "assignment_expression":
        stmt = stmt.parent
    if stmt is None or stmt.type != "expression_statement":
        return False
    return stmt == body or (body.type == "compound_statement" and stmt.parent == body)


def _condition(if_node: Node) -> Node | None:
    c = if_node.child_by_field_name("condition")
    if c is not None and c.type == "condition_clause":
        v = c.child_by_field_name("value")
        return v if v is not None else (c.named_children[0] if c.named_children else None)
    return c


def unroll_pragma(loop: Node) -> Node | None:
    """The ``#pragma unroll ...`` line right before ``loop`` (comments between allowed), or None."""
    prev = loop.prev_named_sibling
    while prev is not None and prev.type == "comment":
        prev = prev.prev_named_sibling
    if prev is not None and prev.type == "preproc_call" and sx.text(prev.child_by_field_name("directive")) == "#pragma" \
            and "unroll" in sx.text(prev):
        return prev
    return None


@dataclass(frozen=True)
class ClusterGroup:
    """The lanes of a row that rowpar_cluster spreads over a thread block cluster: ``blocks`` blocks of ``threads``."""

    blocks: int
    threads: int

    @property
    def lanes(self) -> int:
        return self.blocks * self.threads


def _cluster_lane(v: Node | None, block: int | None) -> ClusterGroup | None:
    """rowpar_cluster's lane, ``(blockIdx.x % Cu) * Bu + threadIdx.x`` with B the block's threads, as its group."""
    if v is None or v.type != "binary_expression" or sx.operator(v) != "+" or block is None:
        return None
    left, right = sx.unparen(v.child_by_field_name("left")), v.child_by_field_name("right")
    if not sx.is_builtin(sx.uncast(right), "threadIdx", "x") or left is None or left.type != "binary_expression" \
            or sx.operator(left) != "*":
        return None
    rank, b = sx.unparen(left.child_by_field_name("left")), sx.unparen(left.child_by_field_name("right"))
    bv = sx.literal_value(b) if sx.is_number(b) else None
    if rank is None or rank.type != "binary_expression" or sx.operator(rank) != "%" or bv != block \
            or not sx.is_builtin(sx.uncast(rank.child_by_field_name("left")), "blockIdx", "x"):
        return None
    c = sx.unparen(rank.child_by_field_name("right"))
    cv = sx.literal_value(c) if sx.is_number(c) else None
    return ClusterGroup(cv, bv) if isinstance(cv, int) and cv > 1 else None


def _rowpar_arg_combine(loop: Node, value: str, index: str | None) -> bool:
    """rowpar's ``ptxf_group_reduce_arg<L>(v, k, ...)`` / ``ptxf_block_reduce_arg`` / ``ptxf_row_reduce_arg`` right after the loop."""
    nxt = loop.next_named_sibling
    while nxt is not None and nxt.type == "comment":
        nxt = nxt.next_named_sibling
    t = sx.text(nxt)
    combines = ("ptxf_group_reduce_arg<", "ptxf_block_reduce_arg(", "ptxf_row_reduce_arg(", "ptxf_cluster_reduce_arg<")
    return index is not None and any(c in t for c in combines) and f"({value}, {index}," in t


def _rowpar_tuple_merge(loop: Node) -> bool:
    """rowpar's merge of a tuple's lane parts (``{ ptxf_softmax<...> ptxf_part = ...; ptxf_..._merge(ptxf_part); ... }``)
    right after the loop."""
    nxt = loop.next_named_sibling
    while nxt is not None and nxt.type == "comment":
        nxt = nxt.next_named_sibling
    t = sx.text(nxt)
    return "ptxf_part" in t and "_merge" in t and ("ptxf_softmax<" in t or "ptxf_welford<" in t)


def _element_value(ident: Node) -> bool:
    """``ident`` is the pointer of ``p[i]`` whose element value is read (so a call given it gets a value, not the pointer)."""
    p = ident.parent
    return p is not None and p.type == "subscript_expression" and p.child_by_field_name("argument") == ident and access_kind(p) == "reads"


def reindent(text: str, old: str, new: str) -> str:
    """``text`` (a statement's source) with ``old`` indentation replaced by ``new`` on every line after the first."""
    lines = text.split("\n")
    return "\n".join(lines[:1] + [new + ln[len(old):] if ln.startswith(old) else new + ln.lstrip() for ln in lines[1:]])


def _ident(name: str) -> Node:
    return sx.parse(f"int z = {name};".encode()).root_node.named_children[0].child_by_field_name("declarator").child_by_field_name("value")


def _unpack(elem: str, chunk: str, k: int, vec: int) -> str:
    """Element ``k`` of the chunk ``chunk`` (a uint4 or uint2 of VEC elements) as an element-type expression."""
    to_elem = ELEMENTS[elem][1]
    if ELEMENTS[elem][0] == 4:
        return to_elem.format(f"{chunk}.{COMPONENTS[k]}")
    word = f"{chunk}.{COMPONENTS[k // 2]}"
    return to_elem.format(word + (" >> 16" if k % 2 else " & 0xffffu"))
