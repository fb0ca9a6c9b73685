"""``atomic_agg``: one atomic per thread per element -> a register per thread, one atomic per warp.

A naive global reduction issues an atomic for every element, all to one address::

    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(out, x[i] * y[i]);          // a sum, a dot product, a count, atomicMax ...

The pass accumulates each thread's contributions in a register where the atomics were (``acc +=
(T)(e)``: the same conversion the atomic made; a flag records that the thread contributed), and at
the end of the kernel combines the registers across the warp (shuffles, or ``__reduce_*_sync`` for
32-bit integers from sm_80) and lets lane 0 issue one atomic for the warp, only when some lane of
the warp contributed (a ballot: the address is touched exactly when the original touched it). After
``grid_stride`` (which makes each thread loop over many elements) that is one atomic per warp for the
whole kernel. The launch is kept.

Handled: ``atomicAdd``, ``atomicSub``, ``atomicMax``, ``atomicMin``, ``atomicAnd``, ``atomicOr``,
``atomicXor`` on a pointer parameter of a 32- or 64-bit integer type (exact: integer sums wrap the same
way in any order; the accumulator of a sum or bitwise op is unsigned, so no signed overflow), and
``atomicAdd`` on ``float``/``double`` (re-associated: refused when the spec asks for exact results,
``rtol = atol = 0``, or for repeatable bits, ``check.deterministic = true``, which atomics in any order
never promise).

Preconditions, each atomic (a refusal says which failed):

- its return value is unused (the call is a statement of its own, or cast to ``void``);
- it is not issued by one thread of a block or warp (under ``if (tid == 0)``, ``if (lane == 0)``: a reduction's
  last step, already one atomic per block or warp);
- its address is ``p``, ``p + e``, ``e + p`` or ``&p[e]`` with ``p`` a pointer parameter and ``e``
  the same on every lane of a warp for the whole thread: built from literals, ``blockIdx``,
  ``blockDim``, ``gridDim``, scalar parameters never written and locals declared once at the top of
  the body (before any early return) from such values and never written (no ``threadIdx``, loop
  variable, load or call);
- ``p`` is used nowhere else in the kernel (no read, store or other atomic on it) and through one
  operation only, so moving its updates to the end of the kernel cannot be observed.

And the kernel: every thread reaches the end (the only ``return`` statements are top-level guards
``if (c) return;``, rewritten as ``if (!(c)) { ... }`` around the rest; no ``goto``, no inline
``asm``), so all lanes of a warp meet at the combining shuffles; a kernel already aggregated is left
alone.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import syntax as sx
from .affine import add, poly
from .base import Unit
from .grid_stride import is_bare_return
from .rowpar import PlannedPass, Refused
from .syntax import Node

OPS = {"atomicAdd": "add", "atomicSub": "sub", "atomicMax": "max", "atomicMin": "min", "atomicAnd": "and",
       "atomicOr": "or", "atomicXor": "xor"}
NOT_REDUCTIONS = ("atomicExch", "atomicCAS", "atomicInc", "atomicDec")
KINDS = {  # the pointee's type -> i32, u32, i64, u64, f32, f64
    **dict.fromkeys(("int", "signed", "signed int", "int32_t"), "i32"),
    **dict.fromkeys(("unsigned", "unsigned int", "uint32_t"), "u32"),
    **dict.fromkeys(("long long", "long long int", "int64_t"), "i64"),
    **dict.fromkeys(("unsigned long long", "unsigned long long int", "uint64_t"), "u64"),
    "float": "f32", "double": "f64",
}
WIDTH = {"i32": 4, "u32": 4, "f32": 4, "i64": 8, "u64": 8, "f64": 8}  # bytes an element
KIND_OPS = {  # the atomics CUDA has for each kind
    "i32": {"add", "sub", "max", "min", "and", "or", "xor"}, "u32": {"add", "sub", "max", "min", "and", "or", "xor"},
    "i64": {"max", "min"}, "u64": {"add", "max", "min", "and", "or", "xor"}, "f32": {"add"}, "f64": {"add"},
}
UNIFORM_BUILTINS = ("blockIdx", "blockDim", "gridDim")  # the same on every lane of a warp
MARK = "(transform atomic_agg)"

HELPERS = {
    "ptxf_warp_lane": """\
static __device__ __forceinline__ unsigned ptxf_warp_lane()
{   // this thread's lane in its warp (a block's threads numbered x fastest, then y, then z)
    return (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) & 31u;
}""",
    "ptxf_warp_lanes": """\
static __device__ __forceinline__ unsigned ptxf_warp_lanes()
{   // the lanes of this thread's warp that exist: all 32, fewer in the last warp of a block that is not a multiple of 32
    const unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const unsigned left = blockDim.x * blockDim.y * blockDim.z - (t & ~31u);
    return left >= 32u ? 0xffffffffu : (1u << left) - 1u;
}""",
    "ptxf_warp_fold": """\
template <typename T, typename F>
static __device__ __forceinline__ T ptxf_warp_fold(T v, unsigned lanes, F op)
{   // op over the values of the warp's lanes in `lanes` (lane 0 among them) by a tree of shuffles: lane 0 gets the whole
    const unsigned lane = ptxf_warp_lane();
#pragma unroll
    for (unsigned o = 16u; o > 0u; o >>= 1) {
        const T w = __shfl_down_sync(lanes, v, o);
        if (lane + o < 32u && ((lanes >> (lane + o)) & 1u)) v = op(v, w);
    }
    return v;
}""",
}

# what a sum or bitwise accumulator of each integer kind is kept in (no signed overflow); max/min keep the type
UNSIGNED = {"i32": "unsigned", "u32": "unsigned", "i64": "unsigned long long", "u64": "unsigned long long"}
IDENTITY = {
    ("f32", "add"): "0.0f", ("f64", "add"): "0.0",
    **{(k, op): "0u" if k in ("i32", "u32") else "0ull" for k in UNSIGNED for op in ("add", "sub", "or", "xor")},
    **{(k, "and"): "0xffffffffu" if k in ("i32", "u32") else "0xffffffffffffffffull" for k in UNSIGNED},
    ("i32", "max"): "(-2147483647 - 1)", ("u32", "max"): "0u",
    ("i64", "max"): "(-9223372036854775807LL - 1)", ("u64", "max"): "0ull",
    ("i32", "min"): "2147483647", ("u32", "min"): "0xffffffffu",
    ("i64", "min"): "9223372036854775807LL", ("u64", "min"): "0xffffffffffffffffull",
}
COMBINE = {"add": "ptxf_a + ptxf_b", "sub": "ptxf_a + ptxf_b", "and": "ptxf_a & ptxf_b", "or": "ptxf_a | ptxf_b",
           "xor": "ptxf_a ^ ptxf_b", "max": "ptxf_a > ptxf_b ? ptxf_a : ptxf_b", "min": "ptxf_a < ptxf_b ? ptxf_a : ptxf_b"}
ASSIGN = {"add": "+=", "sub": "+=", "and": "&=", "or": "|=", "xor": "^="}
REDUCE_SYNC = {"add": "__reduce_add_sync", "sub": "__reduce_add_sync", "and": "__reduce_and_sync",
               "or": "__reduce_or_sync", "xor": "__reduce_xor_sync", "max": "__reduce_max_sync", "min": "__reduce_min_sync"}
REDUCE_SYNC_ARCH = 80  # __reduce_*_sync: compute capability 8.0 and later


@dataclass
class Site:
    """One atomic statement to fold into a register: the statement, the call, the value's node and the address."""

    stmt: Node
    call: Node
    value: Node
    address: Node
    root: Node  # the pointer parameter's identifier in the address
    index: list[Node]  # the index into it: terms of a sum (none: the pointer itself)


@dataclass
class Group:
    """The atomics of one operation on one address (one accumulator): ``root`` the pointer parameter, ``ctype``
    its element type as written, ``kind`` (:data:`KINDS`), ``op`` (:data:`OPS` values), ``func`` the atomic."""

    root: str
    ctype: str
    kind: str
    op: str
    func: str
    address: str
    sites: list[Site] = field(default_factory=list)

    @property
    def acc_type(self) -> str:
        """The accumulator's C type: the element type, or its unsigned counterpart for integer sums and bitwise ops."""
        if self.kind in UNSIGNED and self.op not in ("max", "min"):
            return UNSIGNED[self.kind]
        return self.ctype


@dataclass
class Plan:
    """The whole rewrite: the groups (each an accumulator), the top-level return guards to turn around the rest."""

    groups: list[Group]
    guards: list[Node]
    arch: int


class AtomicAggPass(PlannedPass):
    """Atomics to a warp-uniform address -> a register per thread, one atomic per warp (see the module docstring)."""

    name = "atomic_agg"
    group = None  # composes with the grid passes: after grid_stride, one atomic per warp for the kernel
    exact = False  # a floating-point sum is re-associated (integer operations are exact)

    def _plan(self, unit: Unit) -> Plan:
        body = unit.body
        if body is None:
            raise Refused("no kernel body")
        if sx.contains_call(body, ("ptxf_warp_lanes",)):
            raise Refused("the kernel's atomics are already aggregated per warp")
        calls = [n for n in sx.walk(body) if (sx.call_name(n) or "").startswith("atomic")]
        if not calls:
            raise Refused("no atomic in the kernel")
        guards = return_guards(body)
        uniform = uniform_names(unit, guards[0].start_byte if guards else body.end_byte)
        reasons: list[str] = []
        groups: dict[tuple, Group] = {}
        for call in calls:
            try:
                site, group = self._site(unit, call, uniform)
            except Refused as e:
                reasons.append(f"{site_text(call)}: {e}")
                continue
            key = (group.root, group.op, group.ctype, _index_key(site.index))
            groups.setdefault(key, group).sites.append(site)
        kept = self._exclusive(unit, list(groups.values()), reasons)
        if not kept:
            raise Refused("; ".join(reasons) or "no atomic to aggregate")
        return Plan(kept, guards, _arch_number(unit.spec.arch))

    def _site(self, unit: Unit, call: Node, uniform: set[str]) -> tuple[Site, Group]:
        func = sx.call_name(call)
        if func in NOT_REDUCTIONS:
            raise Refused(f"{func} is not a commutative reduction")
        if func not in OPS:
            raise Refused(f"{func} is not one of {', '.join(OPS)}")
        stmt = statement_of(call)
        if stmt is None:
            raise Refused("its return value is used (or it is not a statement of its own)")
        args = sx.call_args(call)
        if len(args) != 2:
            raise Refused("not two arguments")
        address, value = args
        parsed = atomic_address(address, unit, views=True)
        if parsed is None:
            raise Refused("the address is not p, p + e or &p[e] of a pointer parameter (or a (T*) view of one)")
        root_node, index = parsed
        root = sx.text(root_node)
        if not all(warp_uniform(t, uniform) for t in index):
            raise Refused(f"the address {sx.text(address)!r} may differ between the lanes of a warp (or over a thread's "
                          "life): it uses threadIdx, a loop variable, a load, a call or a variable written in the kernel")
        if any((sx.call_name(n) or "").startswith("atomic") for n in sx.walk(value)):
            raise Refused("an atomic inside its value")
        one = _one_thread_guard(call, unit)
        if one is not None:
            raise Refused(f"it runs under {one!r}, once per block or warp already (a reduction's last step): "
                          "nothing to aggregate")
        ctype = " ".join(w for w in unit.pointers[root].base.split() if w not in ("const", "volatile"))
        view = pointer_view(address)
        if view is not None:  # the atomic works on the view's elements, which must be the buffer's own (one width)
            as_type = " ".join(w for w in view[0].split() if w not in ("const", "volatile"))
            if KINDS.get(as_type) is None or KINDS.get(ctype) is None or WIDTH[KINDS[as_type]] != WIDTH[KINDS[ctype]]:
                raise Refused(f"the address views {root}'s {ctype!r} elements as {as_type!r} of another width or kind")
            ctype = as_type
        kind = KINDS.get(ctype)
        op = OPS[func]
        if kind is None or op not in KIND_OPS[kind]:
            raise Refused(f"{func} on {ctype!r} elements is not handled")
        check = unit.spec.check
        if kind in ("f32", "f64"):
            if check.rtol == 0 and check.atol == 0:
                raise Refused("a floating-point sum would be re-associated, and the spec asks for exact results (rtol = atol = 0)")
            if check.deterministic:
                raise Refused("a floating-point atomic sum, and the spec asks for repeatable bits (check.deterministic = "
                              "true), which atomics in any order never give: set deterministic = false")
        return Site(stmt, call, value, address, root_node, index), Group(root, ctype, kind, op, func, sx.text(address))

    def _exclusive(self, unit: Unit, groups: list[Group], reasons: list[str]) -> list[Group]:
        """The groups whose buffer is used by nothing but that group's kind of atomic (others refused, reasons added)."""
        addressed: dict[str, set[int]] = {}
        ops: dict[str, set[str]] = {}
        types: dict[str, set[str]] = {}
        for g in groups:
            ops.setdefault(g.root, set()).add(g.op)
            types.setdefault(g.root, set()).add(g.ctype)
            for s in g.sites:
                addressed.setdefault(g.root, set()).add(s.root.id)
        shadowed = sx.declared_names(unit.body)
        kept = []
        for g in groups:
            others = [n for n in sx.walk(unit.body) if sx.is_ident(n, g.root) and n.id not in addressed[g.root]]
            if g.root in shadowed:
                reasons.append(f"{g.root!r} is declared again in the kernel")
            elif len(types[g.root]) > 1:  # atomicMax(m, v) beside atomicMax((unsigned*)m, u): two orders of one bits
                reasons.append(f"{g.root!r} is updated as more than one element type ({', '.join(sorted(types[g.root]))})")
            elif len(ops[g.root]) > 1:
                reasons.append(f"{g.root!r} is updated by more than one kind of atomic ({', '.join(sorted(ops[g.root]))})")
            elif others:
                reasons.append(f"{g.root!r} is also used outside its atomics ({site_text(others[0].parent)}): moving the "
                               "updates to the end of the kernel could be seen")
            else:
                kept.append(g)
        return kept

    # -- rewrite ------------------------------------------------------------------------------------------

    def apply(self, unit: Unit) -> Unit:
        plan = self._plan(unit)
        if plan.guards:
            unit = unit.with_text(without_returns(unit, plan.guards))
            plan = self._plan(unit)
        data, body = unit.data, unit.body
        stmts = sx.statements(body)
        indent = sx.line_indent(data, stmts[0].start_byte)[0].decode() if stmts else "    "
        edits: list[tuple[int, int, bytes]] = []
        taken = sx.identifiers(unit.fn)
        names = _fresh_names(taken, len(plan.groups))
        decls = []
        for g, (acc, hit) in zip(plan.groups, names):
            decls.append(f"{g.acc_type} {acc} = {IDENTITY[(g.kind, g.op)]};  // this thread's {g.func}s to {g.address} {MARK}")
            decls.append(f"bool {hit} = false;")
            for s in g.sites:
                edits.append((s.stmt.start_byte, s.stmt.end_byte, _fold_in(unit, g, s, acc, hit).encode()))
        open_brace = body.children[0].end_byte
        edits.append((open_brace, open_brace, ("\n" + "\n".join(indent + d for d in decls)).encode()))
        close = body.children[-1].start_byte
        combine, folds = _combine(plan, names, indent)
        closing = sx.line_indent(data, close)[0].decode() if sx.line_indent(data, close)[1] else ""
        edits.append((len(data[:close].rstrip()), close, ("\n" + combine + "\n" + closing).encode()))
        used = ("ptxf_warp_lane", "ptxf_warp_lanes") + (("ptxf_warp_fold",) if folds else ())
        helpers = [(n, HELPERS[n]) for n in used]
        return unit.with_text(sx.apply_edits(data, edits), helpers=helpers)


def _fold_in(unit: Unit, g: Group, s: Site, acc: str, hit: str) -> str:
    """The statement replacing one atomic: its value (converted as the atomic converted it) into the thread's
    accumulator, the flag set; in braces unless it sits in a block already."""
    value = sx.text(s.value)
    if not (g.kind in ("f32", "f64") and unit.types.of(s.value) == g.ctype):
        value = f"({g.ctype})({value})"
    if g.acc_type != g.ctype:
        value = f"({g.acc_type}){value}"
    if g.op in ("max", "min"):
        cmp = ">" if g.op == "max" else "<"
        return f"{{ const {g.acc_type} ptxf_v = {value}; if (ptxf_v {cmp} {acc}) {acc} = ptxf_v; {hit} = true; }}"
    text = f"{acc} {ASSIGN[g.op]} {value}; {hit} = true;"
    return text if s.stmt.parent is not None and s.stmt.parent.type == "compound_statement" else f"{{ {text} }}"


def _combine(plan: Plan, names: list[tuple[str, str]], indent: str) -> tuple[str, bool]:
    """The block at the end of the kernel (per accumulator, a ballot of the flags, the warp's fold, lane 0's
    atomic), and whether it calls ``ptxf_warp_fold``."""
    lines = [f"{{   // one atomic per warp {MARK}", "    const unsigned ptxf_lanes = ptxf_warp_lanes();"]
    folds = False
    for g, (acc, hit) in zip(plan.groups, names):
        if g.kind in ("i32", "u32") and plan.arch >= REDUCE_SYNC_ARCH:
            fold = f"{REDUCE_SYNC[g.op]}(ptxf_lanes, {acc})"
        else:
            folds = True
            t = g.acc_type
            fold = f"ptxf_warp_fold({acc}, ptxf_lanes, []({t} ptxf_a, {t} ptxf_b) {{ return ({t})({COMBINE[g.op]}); }})"
        lines += [f"    if (__ballot_sync(ptxf_lanes, {hit}) != 0u) {{  // the same on every lane: all or none shuffle",
                  f"        {acc} = {fold};",
                  f"        if (ptxf_warp_lane() == 0u) {g.func}({g.address}, {acc if g.acc_type == g.ctype else f'({g.ctype}){acc}'});",
                  "    }"]
    lines.append("}")
    return "\n".join(indent + x for x in lines), folds


def without_returns(unit: Unit, guards: list[Node], mark: str = MARK) -> bytes:
    """The kernel's text with each top-level ``if (c) return; rest`` (``guards``: :func:`return_guards`) turned into
    ``if (!(c)) { rest }`` (nested), so every thread reaches the end; ``mark`` names the pass in a comment."""
    data, body = unit.data, unit.body
    stmts = sx.statements(body)
    indent = sx.line_indent(data, stmts[0].start_byte)[0].decode()
    gids = {g.id for g in guards}

    def wrapped(k: int) -> str:
        cond = sx.text(sx.unparen(stmts[k].child_by_field_name("condition").child_by_field_name("value")))
        nxt = next((j for j in range(k + 1, len(stmts)) if stmts[j].id in gids), None)
        end = nxt if nxt is not None else len(stmts)
        inner = data[stmts[k + 1].start_byte:stmts[end - 1].end_byte].decode() if end > k + 1 else ""
        if nxt is not None:
            inner = (inner + "\n" + indent if inner else "") + wrapped(nxt)
        head = f"if (!({cond})) {{  // was an early exit: every thread goes on to the end {mark}"
        return head + ("\n" + indent + "    " + inner.replace("\n", "\n    ") if inner else "") + "\n" + indent + "}"

    first = next(k for k, s in enumerate(stmts) if s.id in gids)
    return sx.apply_edits(data, [(stmts[first].start_byte, stmts[-1].end_byte, wrapped(first).encode())])


def return_guards(body: Node, why: str = "a thread leaving early would miss its warp's combining shuffles") -> list[Node]:
    """The top-level ``if (c) return;`` statements of a kernel's ``body``. Raises :class:`Refused` for any other
    ``return`` (``why`` says why it matters), a ``goto`` or inline ``asm``."""
    if sx.contains_type(body, ("goto_statement", "labeled_statement")):
        raise Refused("goto in the kernel")
    if sx.contains_type(body, ("gnu_asm_expression",)):
        raise Refused("inline asm in the kernel (it may leave early)")
    guards = []
    for n in sx.walk(body):
        if n.type != "return_statement" or sx.in_lambda(n, body):
            continue
        guard = n.parent if n.parent.type == "if_statement" else n.parent.parent if n.parent.type == "compound_statement" else None
        if (guard is None or guard.type != "if_statement" or guard.parent != body
                or guard.child_by_field_name("alternative") is not None or not is_bare_return(guard.child_by_field_name("consequence"))):
            raise Refused(f"a return other than a top-level 'if (...) return;' (line {n.start_point[0] + 1}): {why}")
        guards.append(guard)
    return guards


def _one_thread_guard(call: Node, unit: Unit) -> str | None:
    """The condition of an ``if`` around ``call`` that picks one thread of a block or of a warp: ``X == literal``
    with ``X`` the thread's index in the block (``threadIdx.x`` or a local equal to it) or in its warp (``threadIdx.x
    % 32``, ``threadIdx.x & 31`` or a local equal to one), for a literal block of at least 32 threads along x; None
    otherwise. Such an atomic is a reduction's last step, issued once per block or warp, not once per element."""
    body = unit.body
    block = unit.launch.block[0] if unit.launch.block else None
    if not isinstance(block, int) or block < 32:
        return None

    def lane_of(n: Node | None) -> bool:  # threadIdx.x, or its index in the warp
        n = sx.unparen(sx.uncast(n))
        if sx.is_builtin(n, "threadIdx"):
            return True
        if n is not None and n.type == "binary_expression":
            left, right = sx.unparen(n.child_by_field_name("left")), sx.unparen(n.child_by_field_name("right"))
            return sx.is_builtin(sx.uncast(left), "threadIdx") and (
                (sx.operator(n) == "%" and (sx.is_number(right, 32) or sx.is_ident(right, "warpSize")))
                or (sx.operator(n) == "&" and sx.is_number(right, 31)))
        return False

    written = sx.written_names(body)
    declared = [sx.text(d) for n in sx.walk(body) if n.type == "init_declarator"
                and (d := n.child_by_field_name("declarator")) is not None and sx.is_ident(d)]
    locals_ = {sx.text(d) for n in sx.walk(body) if n.type == "init_declarator"
               and (d := n.child_by_field_name("declarator")) is not None and sx.is_ident(d)
               and sx.text(d) not in written and declared.count(sx.text(d)) == 1 and lane_of(n.child_by_field_name("value"))}

    def one_thread(n: Node | None) -> bool:
        n = sx.unparen(sx.uncast(n))
        return lane_of(n) or (sx.is_ident(n) and sx.text(n) in locals_)

    node = call.parent
    while node is not None and node != body:
        then = node.child_by_field_name("consequence") if node.type == "if_statement" else None
        if then is not None and then.start_byte <= call.start_byte < then.end_byte:
            cond = sx.clause_value(node.child_by_field_name("condition"))
            for b in sx.conjuncts(cond):  # X == c itself a conjunct: not under !, || or a comparison
                if b.type == "binary_expression" and sx.operator(b) == "==":
                    left, right = sx.unparen(b.child_by_field_name("left")), sx.unparen(b.child_by_field_name("right"))
                    if (left.type == "number_literal" and one_thread(right)) or (right.type == "number_literal" and one_thread(left)):
                        return sx.text(sx.unparen(cond))
        node = node.parent
    return None


def uniform_names(unit: Unit, before: int) -> set[str]:
    """Names whose value is the same on every lane of a warp and never changes: scalar parameters never written,
    and locals declared once at the top level of the body before byte ``before`` from such values, never written."""
    body = unit.body
    written = sx.written_names(body)
    counts = sx.declaration_counts(unit.fn)
    decl = sx.function_declarator(unit.fn)
    names = set()
    for p in decl.child_by_field_name("parameters").named_children:
        d = p.child_by_field_name("declarator") if p.type == "parameter_declaration" else None
        if sx.is_ident(d) and sx.text(d) not in written and counts.get(sx.text(d)) == 1:
            names.add(sx.text(d))
    for s in sx.statements(body):
        if s.start_byte >= before or s.type != "declaration":
            continue
        for d in s.children_by_field_name("declarator"):
            inner = d.child_by_field_name("declarator") if d.type == "init_declarator" else None
            if not sx.is_ident(inner):
                continue
            name = sx.text(inner)
            if name not in written and counts.get(name) == 1 and warp_uniform(d.child_by_field_name("value"), names):
                names.add(name)
    return names


def warp_uniform(node: Node | None, names: set[str]) -> bool:
    """``node`` has the same value on every lane of a warp: literals, uniform names, blockIdx/blockDim/gridDim, arithmetic."""
    node = sx.unparen(node)
    if node is None:
        return False
    t = node.type
    if t in ("number_literal", "true", "false", "char_literal", "sizeof_expression"):
        return True
    if t == "identifier":
        return sx.text(node) in names or sx.text(node) == "warpSize"
    if t == "field_expression":
        return any(sx.is_builtin(node, v, f) for v in UNIFORM_BUILTINS for f in "xyz")
    if t == "cast_expression":
        return warp_uniform(node.child_by_field_name("value"), names)
    if t == "unary_expression":
        return warp_uniform(node.child_by_field_name("argument"), names)
    if t == "binary_expression":
        return warp_uniform(node.child_by_field_name("left"), names) and warp_uniform(node.child_by_field_name("right"), names)
    if t == "conditional_expression":
        return all(warp_uniform(node.child_by_field_name(f), names) for f in ("condition", "consequence", "alternative"))
    return False


def pointer_view(node: Node | None) -> tuple[str, Node] | None:
    """``(T, e)`` of an address written as a view of another pointer's elements as ``T``: ``(T*)e``,
    ``reinterpret_cast<T*>(e)`` (``atomicMax((int*)amax, __float_as_int(v))``, a float max through the int atomic);
    None for any other expression."""
    node = sx.unparen(node)
    if node is None:
        return None
    if node.type == "cast_expression":
        desc, inner = node.child_by_field_name("type"), node.child_by_field_name("value")
    elif node.type == "call_expression" and (fn := node.child_by_field_name("function")) is not None \
            and fn.type == "template_function" and sx.text(fn.child_by_field_name("name")) == "reinterpret_cast":
        targs = fn.child_by_field_name("arguments").named_children
        args = sx.call_args(node)
        if len(targs) != 1 or len(args) != 1:
            return None
        desc, inner = targs[0], args[0]
    else:
        return None
    if desc is None or desc.type != "type_descriptor" or inner is None:
        return None
    decl = desc.child_by_field_name("declarator")
    if decl is None or decl.type != "abstract_pointer_declarator" or decl.named_child_count:
        return None  # (T** and the like)
    return sx.type_text(desc.child_by_field_name("type")), inner


def atomic_address(node: Node, unit: Unit, views: bool = False) -> tuple[Node, list[Node]] | None:
    """``(the pointer parameter's identifier, the index's terms)`` of an atomic's address: ``p``, ``&p[e]`` or a sum of
    ``p`` and terms (``p + e``, ``e + p``, ``p + a + b``); with ``views``, also any of those as a :func:`pointer_view`
    (``(int*)amax``: the caller checks the view's element type)."""
    node = sx.unparen(node)
    if views and (view := pointer_view(node)) is not None:
        node = sx.unparen(view[1])

    def param(n: Node | None) -> bool:
        return sx.is_ident(n) and sx.text(n) in unit.pointers

    if node.type == "pointer_expression" and sx.operator(node) == "&":
        sub = sx.unparen(node.child_by_field_name("argument"))
        if sub is not None and sub.type == "subscript_expression":
            arg, index = sx.unparen(sub.child_by_field_name("argument")), sx.subscript_index(sub)
            if param(arg) and index is not None:
                return arg, [index]
        return None
    terms, stack = [], [node]
    while stack:
        n = sx.unparen(stack.pop())
        if n.type == "binary_expression" and sx.operator(n) == "+":
            stack += [n.child_by_field_name("right"), n.child_by_field_name("left")]
        else:
            terms.append(n)
    roots = [t for t in terms if param(t)]
    if len(roots) != 1:
        return None
    return roots[0], [t for t in terms if t is not roots[0]]


def _index_key(index: list[Node]) -> tuple:
    """What makes two indices into one pointer the same: the index as a polynomial, else its terms' text without spaces."""
    total: dict | None = {}
    for t in index:
        p = poly(t)
        total = None if p is None or total is None else add(total, p)
    if total is None:
        return (("text", tuple("".join(sx.text(t).split()) for t in index)),)
    return tuple(sorted(total.items()))


def statement_of(call: Node) -> Node | None:
    """The expression statement that is nothing but ``call`` (possibly parenthesised or cast to void), else None."""
    node = call
    while node.parent is not None and (node.parent.type == "parenthesized_expression"
                                       or (node.parent.type == "cast_expression" and sx.text(node.parent.child_by_field_name("type")) == "void")):
        node = node.parent
    parent = node.parent
    return parent if parent is not None and parent.type == "expression_statement" else None


def _fresh_names(taken: set[str], n: int) -> list[tuple[str, str]]:
    out, k = [], 0
    while len(out) < n:
        acc, hit = f"ptxf_acc{k}", f"ptxf_hit{k}"
        if acc not in taken and hit not in taken:
            out.append((acc, hit))
        k += 1
    return out


def _arch_number(arch: str) -> int:
    digits = "".join(c for c in arch.removeprefix("sm_").removeprefix("compute_") if c.isdigit())
    return int(digits) if digits else 0


def site_text(node: Node) -> str:
    """``line L: <the node's text, whitespace folded, cut at 60 characters>`` for refusal reasons."""
    t = " ".join(sx.text(node).split())
    return f"line {node.start_point[0] + 1}: {t[:60]}{'...' if len(t) > 60 else ''}"
