"""``hold_row``: a row that several lane-strided loops read is read once, into registers.

Pattern: two or more loops, statements of one block, with the same header shape (rowpar's and
blockrow's split loops, or a kernel written that way)::

    for (T j = a + LANE; j < n; j += S) BODY1      // reads p[idx(j)]
    ...                                            // anything that writes none of a, n, S, idx's names
    for (T j = a + LANE; j < n; j += S) BODY2      // reads p[idx(j)] again

``LANE`` a lane term (``threadIdx.x``, ``lane = threadIdx.x % C`` or ``& (C - 1)``, rowpar's
``ptxf_lane``: non-negative), ``S`` a positive literal or ``blockDim``, the same start, bound and
step text in every loop. Iteration ``t`` of a lane has ``j = a + LANE + t * S`` in each of them, so
the element ``p[idx(j)]`` it reads at iteration ``t`` is the same in every loop. Rewrite: before the
first loop ``E ptxf_heldK[H];`` per held buffer and ``const bool ptxf_hold = n - a <= H * S;`` (then
no lane has more than H iterations); each loop becomes::

    if (ptxf_hold) {                      // H elements per lane at most: the row is in registers
        #pragma unroll
        for (int ptxf_t = 0; ptxf_t < H; ++ptxf_t) {
            const T j = a + LANE + ptxf_t * S;
            if (j < n) { ptxf_held0[ptxf_t] = p[idx(j)];  /* the first loop only */  BODY' }
        }
    } else {
        the original loop
    }

with every read of ``p[idx(j)]`` in BODY' replaced by ``ptxf_held0[ptxf_t]``. After full unrolling
the array has compile-time indices only, so it lives in registers (no local memory). The flag is
computed once and the same for every lane of the row wherever ``a``, ``n`` and ``S`` are (rowpar's
and blockrow's rows; any lane-free bound), so lanes do not diverge; it is correct per thread in any
case (the flag implies that thread's loops run at most H iterations). Exact: each lane computes
what it computed before, in the same order; only the loads are fewer.

H: 8, 16 or 32 elements per lane, or ``auto``: the smallest power of two holding every bench size's
elements per lane (the loop length through the spec's sizes, over the lanes: a literal step or the
launch's ``block[0]``) among those that fit in 16 registers per lane (all held buffers together).
A fixed H whose held path would run at no bench size is refused, and so is any H whose held
registers per lane exceed half of what a thread of the largest block may have (65536 / threads).

colpar's loops (the lane ``threadIdx.y``, the step the column's threads) are held too: a channel softmax's column read
once for its (max, sum) pass and its write pass.

Refused (with the reason): ``goto`` in the kernel; vector_loops' output (``hold_row`` goes before
it in a chain: vector_loops then widens the original loops left in the ``else`` branches); a kernel
already held; no two such loops in one block (loops whose starts differ, such as a max from
``j = 1`` and a sum from ``j = 0``, give their lanes other elements); no buffer read by two of them
at the same index (the index as a polynomial through the local pointers' offsets and the constants
of :mod:`.rowpar`, the loop variable renamed; a pointer cast to another element type is not taken
for its buffer); a buffer the kernel writes anywhere, in-place updates included (distinct parameters
are distinct buffers, as ``restrict`` assumes: the verifier never passes overlapping ones); a first
read under a condition, or a ``continue`` in the first loop (the hoisted load could touch an element
the original never read); ``break``/``return``/``goto``, barriers or warp collectives in a loop; a
name of the bounds, the step or the index written between the first and the last loop.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ptxfactory.protocol.expr import ExprError, evaluate

from . import syntax as sx
from .affine import Poly, add, poly
from .base import Unit, access_kind
from .syntax import COLLECTIVES
from .rowpar import PlannedPass, Refused, spec_expression
from .syntax import Node
from .vector_loops import PREFIX as VECTOR_PREFIX
from .vector_loops import LoopAnalysis, access_of, plus_terms, reindent, unroll_pragma

HELD = "ptxf_held"
FLAG = "ptxf_hold"
STEP_VAR = "ptxf_t"
VARIANTS = ("auto", 8, 16, 32)
AUTO_WORDS = 16  # held 32-bit registers per lane the auto variant takes at most (room left for the loops' own
# loads in flight, e.g. vector_loops' 16-byte chunks 4x unrolled on the long rows' path, under launch_bounds' register
# target: 32 floats held spill there); the fixed variants go up to 32 elements
REGISTERS_PER_SM_BLOCK = 65536  # 32-bit registers a block may use (every sm_70+ GPU)
ELEMENT_WORDS = {"double": 2, "long long": 2, "unsigned long long": 2, "int64_t": 2, "uint64_t": 2, "size_t": 2,
                 "float2": 2, "int2": 2, "uint2": 2, "float4": 4, "int4": 4, "uint4": 4, "double2": 4}
JUMPS = ("break_statement", "return_statement", "goto_statement", "labeled_statement")
CONDITIONAL = ("if_statement", "conditional_expression", "for_statement", "while_statement", "do_statement",
               "switch_statement", "case_statement", "lambda_expression")
J = "#j"  # the loop variable in index polynomials, whatever each loop calls it


@dataclass
class _Loop:
    """One lane-strided loop: its header's parts and what two loops of a group must share (``key``)."""

    node: Node
    j: str
    ctype: str
    start: Node
    rest: list[Node]  # the start's terms other than the lane
    step: Node
    bound: Node
    inclusive: bool  # j <= n
    body: Node
    key: tuple
    nested: bool = False  # a statement of an if's branch that is a statement of the block (read, never filled, there)


@dataclass
class _Held:
    """A buffer element read by two or more loops: its pointer, element type, and where it is read."""

    root: str
    elem: str
    reads: dict[int, list[Node]] = field(default_factory=dict)  # loop index -> access nodes replaced
    load: str = ""  # the load's text, hoisted to the top of the first loop's iteration


class HoldRowPass(PlannedPass):
    """Rows read by several lane-strided loops -> read once into ``held`` registers (``held``: elements per lane, or
    ``"auto"``). See the module docstring."""

    group = None  # applies after rowpar/blockrow in a chain, and to kernels written lane-strided
    exact = True

    def __init__(self, held: int | str):
        if held not in VARIANTS:
            raise ValueError(f"hold_row: elements per lane must be one of {VARIANTS}, not {held!r}")
        self.held = held
        self.name = "hold_row_auto" if held == "auto" else f"hold_row{held}"

    # -- precondition -------------------------------------------------------------------------------------

    def _plan(self, unit: Unit):
        if unit.body is None:
            raise Refused("no kernel body")
        ids = sx.identifiers(unit.body)
        if any(i.startswith(VECTOR_PREFIX) for i in ids):
            raise Refused("vector_loops has rewritten the row's loops (hold_row goes before it in a chain)")
        if any(i.startswith(HELD) for i in ids):
            raise Refused("the row is already held")
        if sx.contains_type(unit.body, ("goto_statement",)):
            raise Refused("goto in the kernel (a jump could cross the held array's declaration)")
        a = LoopAnalysis(unit)
        if a.written_roots is None:
            raise Refused("cannot tell which buffers the kernel writes")
        why: list[str] = []
        for block in (n for n in sx.walk(unit.body) if n.type == "compound_statement"):
            groups: dict[tuple, list[_Loop]] = {}
            for s in sx.statements(block):
                for loop, nested in _block_loops(s):
                    lp = _lane_loop(a, loop)
                    if isinstance(lp, str):
                        why.append(f"line {loop.start_point[0] + 1}: {lp}")
                    else:
                        lp.nested = nested
                        groups.setdefault(lp.key, []).append(lp)
            for loops in groups.values():
                if len(loops) < 2:
                    why.append(f"line {loops[0].node.start_point[0] + 1}: no other loop of its block with its bounds and step")
                    continue
                try:
                    held = self._held(unit, a, block, loops)
                    return block, loops, held, self._size(unit, loops[0], held)
                except Refused as e:
                    why.append(str(e))
        raise Refused("no two lane-strided loops (for (T j = a + lane; j < n; j += step)) of one block, with the same "
                      "bounds and step, read one buffer at one index" + (f" ({'; '.join(dict.fromkeys(why))})" if why else ""))

    def _held(self, unit: Unit, a: LoopAnalysis, block: Node, loops: list[_Loop]) -> list[_Held]:
        """The elements two or more of ``loops`` read (raises Refused with the reason when none can be held)."""
        first, last = loops[0].node, loops[-1].node
        # the block's statements from the first loop to the one holding the last (an if whose branch it is)
        span = [s for s in sx.statements(block) if first.start_byte <= s.start_byte <= last.start_byte]
        written = set().union(*(sx.written_names(s) for s in span))
        for lp in loops:
            for part in (lp.start, lp.step, lp.bound):
                if sx.identifiers(part) & written:
                    raise Refused(f"line {first.start_point[0] + 1}: the loops' bounds or step are written between them")
        subst = {k: v for k, v in a.constants.items() if a.declared.get(k) == 1}
        found: dict[tuple, _Held] = {}
        why = []
        for k, lp in enumerate(loops):
            local = sx.declared_names(lp.body)
            for n in sx.walk(lp.body):
                if n.type != "identifier" or sx.text(n) not in a.roots or sx.text(n) in local:
                    continue
                acc = access_of(n)
                if acc is None or acc[2] != "read":
                    continue
                node, terms, _, _, _ = acc
                if node.type == "subscript_expression" and access_kind(node) != "reads":
                    continue
                name = sx.text(n)
                root = a.roots[name]
                index = _index(a, name, terms, subst, lp.j)
                if index is None or J not in {x for m in index for x in m}:
                    continue
                if any(x in local or x in written for m in index for x in m if x != J):
                    continue  # the index moves within an iteration, or between the loops
                if root in a.written_roots:
                    why.append(f"{root} is written by the kernel")
                    continue
                elem = _element(a, name)
                if not elem or elem != _element(a, root):
                    why.append(f"{name}'s element type is unknown or not {root}'s")  # a cast pointer: offsets in other units
                    continue
                h = found.setdefault((root, tuple(sorted(index.items()))), _Held(root, elem))
                h.reads.setdefault(k, []).append(node)
        out = []
        for h in found.values():
            if len(h.reads) < 2:
                continue
            k0 = min(h.reads)
            lp = loops[k0]
            if lp.nested:
                why.append(f"line {lp.node.start_point[0] + 1}: {h.root} is first read in a loop under an if")
                continue
            if sx.contains_type(lp.body, ("continue_statement",)):
                why.append(f"line {lp.node.start_point[0] + 1}: continue in the loop that first reads {h.root}")
                continue
            sure = [x for x in h.reads[k0] if _unconditional(x, lp.body)]
            if not sure:
                why.append(f"line {lp.node.start_point[0] + 1}: {h.root} is first read under a condition")
                continue
            load = _hoisted(a, sure[0], lp)
            if load is None:
                why.append(f"line {lp.node.start_point[0] + 1}: the first read of {h.root} uses names set in the loop's body")
                continue
            h.load = load
            out.append(h)
        if not out:
            reads = f" ({'; '.join(dict.fromkeys(why))})" if why else ""
            raise Refused(f"line {first.start_point[0] + 1}: no buffer read at one index by two of the loops can be held{reads}")
        return out

    def _size(self, unit: Unit, lp: _Loop, held: list[_Held]) -> int:
        """H for this variant (raises Refused when the registers or the spec's sizes rule it out)."""
        counts = _per_lane(unit, lp)
        if self.held == "auto":
            if counts is None:
                raise Refused("elements per lane unknown at the bench sizes (the loop length or the step is not a spec expression)")
            per = sum(ELEMENT_WORDS.get(x.elem, 1) for x in held)  # registers per element held
            fit = [_pow2(c) for c in counts if _pow2(c) * per <= AUTO_WORDS]
            if not fit:
                raise Refused(f"no bench size fits: {min(counts)} elements per lane or more, {per} registers each "
                              f"(at most {AUTO_WORDS} registers)")
            h = max(fit)
        else:
            h = self.held
            if counts is not None and all(c > h for c in counts):
                raise Refused(f"more than {h} elements per lane at every bench size: the held path would never run")
        words = h * sum(ELEMENT_WORDS.get(x.elem, 1) for x in held)
        threads = _max_threads(unit)
        cap = REGISTERS_PER_SM_BLOCK // threads // 2
        if words > cap:
            raise Refused(f"{words} held registers per lane; a block of {threads} threads leaves {cap}")
        return h

    # -- rewrite ------------------------------------------------------------------------------------------

    def apply(self, unit: Unit) -> Unit:
        block, loops, held, h = self._plan(unit)
        data = unit.data
        users = sorted({k for x in held for k in x.reads})
        first = loops[users[0]]
        rest = " + ".join(f"(long long)({sx.text(t)})" for t in first.rest) or "0"
        extra = " + 1" if first.inclusive else ""
        ind = sx.line_indent(data, (unroll_pragma(first.node) or first.node).start_byte)[0].decode()
        decls = [f"{x.elem} {HELD}{i}[{h}];  // {x.root}'s elements of this lane, read once (transform hold_row)"
                 for i, x in enumerate(held)]
        decls.append(f"const bool {FLAG} = (long long)({sx.text(first.bound)}){extra} - ({rest}) <= (long long){h} * "
                     f"(long long)({sx.text(first.step)});  // at most {h} elements per lane")
        edits = []
        for k in users:
            lp = loops[k]
            pragma = unroll_pragma(lp.node)
            start = (pragma or lp.node).start_byte
            text = self._emit(unit, lp, k, held, h, pragma)
            if k == users[0]:
                text = "\n".join(decls).replace("\n", "\n" + ind) + "\n" + ind + text
            edits.append((start, lp.node.end_byte, text.encode()))
        return unit.with_text(sx.apply_edits(data, edits), held=h)

    def _emit(self, unit: Unit, lp: _Loop, k: int, held: list[_Held], h: int, pragma: Node | None) -> str:
        """The text replacing loop ``k`` (and its unroll pragma): the held path, else the original loop."""
        data = unit.data
        ind = sx.line_indent(data, (pragma or lp.node).start_byte)[0].decode()
        i1, i2, i3 = ind + "    ", ind + "        ", ind + "            "
        slot = STEP_VAR
        repl = {(n.start_byte, n.end_byte): f"{HELD}{i}[{slot}]" for i, x in enumerate(held) for n in x.reads.get(k, [])}
        body = sx.render(lp.body, data, lambda nd: repl[(nd.start_byte, nd.end_byte)].encode()
                         if (nd.start_byte, nd.end_byte) in repl else None).decode()
        if lp.body.type == "compound_statement":
            body = body[1:-1].strip()
        loads = [f"{HELD}{i}[{slot}] = {x.load};" for i, x in enumerate(held) if min(x.reads) == k]
        lines = [f"if ({FLAG}) {{  // each lane's elements in registers (transform hold_row)",
                 f"{i1}#pragma unroll",
                 f"{i1}for (int {slot} = 0; {slot} < {h}; ++{slot}) {{",
                 f"{i2}const {lp.ctype} {lp.j} = ({lp.ctype})(({sx.text(lp.start)}) + (long long){slot} * (long long)({sx.text(lp.step)}));",
                 f"{i2}if ({sx.text(lp.node.child_by_field_name('condition'))}) {{"]
        lines += [f"{i3}{x}" for x in loads]
        lines.append(f"{i3}{reindent(body, ind + '    ', i3)}")
        lines += [f"{i2}}}", f"{i1}}}", f"{ind}}} else {{  // more than {h} elements per lane: the original loop"]
        if pragma is not None:
            lines.append(f"{i1}{sx.text(pragma).strip()}")
        lines += [f"{i1}{reindent(sx.text(lp.node), ind, i1)}", f"{ind}}}"]
        return "\n".join(lines)


# -- the loops ------------------------------------------------------------------------------------------------


def _block_loops(stmt: Node) -> list[tuple[Node, bool]]:
    """The loops a statement of a block contributes, each with whether it is nested: the statement itself if it is a
    ``for``; for an ``if``, the ``for`` statements of its branches' blocks (``if (s > 0) { for (...) ... }``, a row's
    second pass under a uniform test), which may read a row held by an earlier loop of the block but never fill it."""
    if stmt.type == "for_statement":
        return [(stmt, False)]
    if stmt.type != "if_statement":
        return []
    out = []
    for field in ("consequence", "alternative"):
        branch = stmt.child_by_field_name(field)
        if branch is not None and branch.type == "else_clause":
            branch = next((c for c in branch.named_children), None)
        if branch is not None and branch.type == "compound_statement":
            out += [(s, True) for s in sx.statements(branch) if s.type == "for_statement"]
        elif branch is not None and branch.type == "for_statement":
            out.append((branch, True))
    return out


def _lane_loop(a: LoopAnalysis, loop: Node) -> _Loop | str:
    """``loop`` as a :class:`_Loop`, or why it is not one."""
    init, cond, upd, body = (loop.child_by_field_name(f) for f in ("initializer", "condition", "update", "body"))
    if init is None or cond is None or upd is None or body is None or init.type != "declaration":
        return "not a for loop declaring its index"
    ds = init.children_by_field_name("declarator")
    if len(ds) != 1 or ds[0].type != "init_declarator" or not sx.is_ident(ds[0].child_by_field_name("declarator")):
        return "not one index declared"
    ctype = sx.type_text(init.child_by_field_name("type"))
    if ctype not in sx.INT_TYPES:
        return f"index type {ctype!r}"
    j = sx.text(ds[0].child_by_field_name("declarator"))
    start = ds[0].child_by_field_name("value")
    terms = plus_terms(start)
    lanes = [t for t in terms if a.lane_group(t) is not None]
    if len(lanes) != 1 or any(j in sx.identifiers(t) for t in terms):
        return "the start is not a + lane"
    u = sx.unparen(upd)
    if not (u.type == "assignment_expression" and sx.operator(u) == "+=" and sx.is_ident(sx.unparen(u.child_by_field_name("left")), j)):
        return "the step is not j += S"
    step = sx.unparen(u.child_by_field_name("right"))
    lit = sx.literal_value(step) if sx.is_number(step) else None
    if not ((isinstance(lit, int) and lit > 0) or any(sx.is_builtin(step, "blockDim", f) for f in "xyz")):
        return f"the step {sx.text(step)!r} is not a positive literal or blockDim"
    c = sx.unparen(cond)
    if c is None or c.type != "binary_expression":
        return "the condition is not j < n"
    op, left, right = sx.operator(c), sx.unparen(c.child_by_field_name("left")), sx.unparen(c.child_by_field_name("right"))
    if op in ("<", "<=") and sx.is_ident(left, j):
        bound, inclusive = c.child_by_field_name("right"), op == "<="
    elif op in (">", ">=") and sx.is_ident(right, j):
        bound, inclusive = c.child_by_field_name("left"), op == ">="
    else:
        return "the condition is not j < n"
    if j in sx.identifiers(bound):
        return "the bound depends on the index"
    if sx.contains_type(body, JUMPS):
        return "break, return or goto in the body"
    if sx.contains_call(body, COLLECTIVES):
        return "a barrier or warp collective in the body"
    if j in sx.written_names(body):
        return "the index is written in the body"
    norm = lambda n: " ".join(sx.text(n).split())  # noqa: E731
    key = (ctype, norm(start), norm(step), inclusive, norm(bound))
    return _Loop(loop, j, ctype, start, [t for t in terms if t is not lanes[0]], step, bound, inclusive, body, key)


def _index(a: LoopAnalysis, name: str, terms: list[Node], subst: dict[str, Poly], j: str) -> Poly | None:
    """The element ``name[terms]`` reads, from the start of its buffer, as a polynomial with ``j`` renamed :data:`J`."""
    off = a.offsets.get(name)
    if off is None:
        return None
    total: Poly = dict(off)
    for t in terms:
        p = poly(t, subst)
        if p is None:
            return None
        total = add(total, p)
    return {tuple(sorted(J if x == j else x for x in m)): c for m, c in total.items()}


def _element(a: LoopAnalysis, name: str) -> str:
    """The element type of pointer ``name`` (qualifiers dropped; "" when unknown)."""
    elem = a.unit.types.element.get(name)
    return " ".join(w for w in (elem or "").split() if w not in ("const", "volatile", "__restrict__"))


def _unconditional(node: Node, body: Node) -> bool:
    """``node`` is evaluated on every iteration of the loop whose body is ``body`` (no condition, loop or
    short-circuit between them)."""
    child, p = node, node.parent
    while p is not None and p != body.parent:
        if p.type in CONDITIONAL:
            return False
        if p.type == "binary_expression" and sx.operator(p) in ("&&", "||") and child == p.child_by_field_name("right"):
            return False
        child, p = p, p.parent
    return True


def _hoisted(a: LoopAnalysis, access: Node, lp: _Loop) -> str | None:
    """The text of ``access`` valid at the top of the loop's body: names the body declares (constants: declared once,
    never written) replaced by their initial values; None when one cannot be."""
    local = sx.declared_names(lp.body)

    def value(nd: Node, depth: int = 0) -> bytes | None:
        if not sx.is_ident(nd) or sx.text(nd) not in local:
            return None
        name = sx.text(nd)
        init = a.inits.get(name)
        if depth > 8 or a.declared.get(name) != 1 or name in a.written or init is None:
            raise KeyError(name)
        return b"(" + sx.render(init, a.unit.data, lambda m: value(m, depth + 1)) + b")"

    try:
        return sx.render(access, a.unit.data, value).decode()
    except KeyError:
        return None


# -- sizes ----------------------------------------------------------------------------------------------------


def _per_lane(unit: Unit, lp: _Loop) -> list[int] | None:
    """Elements per lane of the loop at each bench size (None when the length or the step is not known there)."""
    if len(lp.rest) > 1:
        return None
    length = spec_expression(unit, lp.bound, lp.rest[0] if lp.rest else None, start_zero=not lp.rest)
    if length is None:
        return None
    lit = sx.literal_value(lp.step) if sx.is_number(lp.step) else None
    dim = next((i for i, f in enumerate("xyz") if sx.is_builtin(lp.step, "blockDim", f)), None)
    out = []
    for size in unit.spec.bench.sizes:
        try:
            n = int(evaluate(length, size)) + (1 if lp.inclusive else 0)
            s = lit if isinstance(lit, int) else int(evaluate(str(unit.launch.block[dim]), size)) if dim is not None and dim < len(unit.launch.block) else None
        except ExprError:
            return None
        if not s:
            return None
        out.append(max(0, -(-n // s)))
    return out or None


def _pow2(n: int) -> int:
    """The smallest power of two >= n (2 at least: a loop of one iteration per lane gains nothing held)."""
    h = 2
    while h < n:
        h *= 2
    return h


def _max_threads(unit: Unit) -> int:
    """The most threads a block of the unit's launch has at any spec size (1024 when unknown)."""
    most = 0
    for size in unit.spec.check.sizes + unit.spec.bench.sizes:
        n = 1
        try:
            for b in unit.launch.block:
                n *= int(evaluate(str(b), size))
        except ExprError:
            return 1024
        most = max(most, n)
    return min(1024, most) or 1024
