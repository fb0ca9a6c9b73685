"""``shuffle_reduce``: the shared-memory tree reduction loop becomes warp shuffles plus one step across warps.

Pattern (``t`` is ``threadIdx.x`` or a never-written copy of it; ``sh`` a ``__shared__`` array)::

    for (int s = blockDim.x / 2; s > 0; s >>= 1) {      // or s /= 2, blockDim.x >> 1, or block/2 as a literal
        if (t < s) sh[t] op= sh[t + s];                  // +=, = sh[t] + sh[t + s], = fmaxf/fminf/max/min(...)
        __syncthreads();
    }

Replacement: each warp reduces its 32 values of ``sh`` with ``__shfl_down_sync``; lane 0 of each
warp writes its result to a private ``__shared__`` array; after one barrier warp 0 reduces those
``blockDim.x / 32`` values and thread 0 writes the block's result to ``sh[0]``; a final barrier.
So ``sh[0]`` holds the same reduction for the code after the loop, with 2 barriers instead of
log2(block). The other elements of ``sh`` keep the threads' partials (the loop overwrote them), so
the pass also checks that the code after the loop (and, in an enclosing loop, before it) reads only
``sh[0]`` until it writes ``sh[t]`` again.

Preconditions: a 1-D launch whose block is an integer multiple of 32 (up to 1024): every warp is
full, so the shuffles' full mask is right; the combining operation is one of the above on a type
the shuffles take (float, double, int, unsigned, long long). Max/min reductions are exact; a sum is
re-associated (warps first), so a floating-point sum is not proposed when the spec asks for exact
results (``rtol = atol = 0``).
"""
from __future__ import annotations

from dataclasses import dataclass

from . import syntax as sx
from .base import Unit
from .syntax import Node

SHUFFLE_TYPES = frozenset({"float", "double", "int", "unsigned", "unsigned int", "long long", "unsigned long long"})
MINMAX = frozenset({"fmaxf", "fminf", "fmax", "fmin", "max", "min"})


@dataclass(frozen=True)
class Reduction:
    """One matched loop: the loop node, the shared array's name and element type, and the combining op ("+" or a function name)."""

    loop: Node
    array: str
    ctype: str
    op: str


class ShuffleReducePass:
    """Shared-memory tree reduction -> warp shuffles + one cross-warp step; ``sh[0]`` keeps the block's result."""

    name = "shuffle_reduce"
    group = None
    exact = False  # exact for max/min; a sum is re-associated

    def _matches(self, unit: Unit, why: list[str] | None = None) -> list[Reduction]:
        """The tree loops this pass rewrites; ``why`` gets the reason when there are none."""
        why = [] if why is None else why
        threads = unit.block_threads()
        if unit.body is None or threads is None or threads % 32 or not 32 <= threads <= 1024 or not unit.block_is_1d():
            why.append("not a 1-D launch of a literal block of 32-1024 threads, a multiple of 32")
            return []
        shared = _shared_arrays(unit.body)
        aliases = _tid_aliases(unit.body)
        exact_only = unit.spec.check.rtol == 0 and unit.spec.check.atol == 0
        out, trees = [], 0
        for loop in sx.walk(unit.body):
            if loop.type != "for_statement":
                continue
            reds = match_tree(loop, shared, aliases, threads)
            if reds is None:
                continue
            trees += 1
            line = loop.start_point[0] + 1
            before = len(why)
            for red in reds:  # (a loop halving several arrays: each its own shuffles, or the loop stays)
                if red.ctype not in SHUFFLE_TYPES:
                    why.append(f"line {line}: a tree of {red.ctype}, which warp shuffles do not move")
                elif red.op == "+" and exact_only and red.ctype in ("float", "double"):
                    why.append(f"line {line}: a floating-point sum where the spec asks for exact results")
                elif red.op in ("fmaxf", "fminf") and red.ctype != "float":
                    why.append(f"line {line}: {red.op} of {red.ctype}")
                elif not _later_reads_only_first(unit.body, red, aliases):
                    why.append(f"line {line}: {red.array}[...] read other than at [0] after the tree")
            if len(why) == before:
                out += reds
        if not trees:
            why.append(f"no shared-memory tree loop (for (s = blockDim.x / 2 or {threads // 2}; s > 0; s >>= 1) "
                       "{ if (tid < s) sh[tid] op= sh[tid + s]; __syncthreads(); } in a block of a power of two)")
        return out

    def why_not(self, unit: Unit) -> str | None:
        """None when the pass applies; otherwise why not (the first reason for each tree loop)."""
        why: list[str] = []
        return None if self._matches(unit, why) else "; ".join(why)

    def applies(self, unit: Unit) -> bool:
        return bool(self._matches(unit))

    def apply(self, unit: Unit) -> Unit:
        edits, loops = [], {}
        for red in self._matches(unit):
            loops.setdefault(red.loop.id, []).append(red)
        for reds in loops.values():  # one loop: its arrays' shuffle reductions one after the other
            loop = reds[0].loop
            indent, _ = sx.line_indent(unit.data, loop.start_byte)
            text = ("\n" + indent.decode()).join(_replacement(red, indent.decode()) for red in reds)
            edits.append((loop.start_byte, loop.end_byte, text.encode()))
        ops = sorted({r.op for r in self._matches(unit)})
        return unit.with_text(sx.apply_edits(unit.data, edits), reduce_ops="+".join("sum" if o == "+" else o for o in ops))


def _combine(op: str, a: str, b: str) -> str:
    return f"{a} + {b}" if op == "+" else f"{op}({a}, {b})"


def _replacement(red: Reduction, indent: str) -> str:
    t, sh, ty = "threadIdx.x", red.array, red.ctype
    lines = [
        f"{{  // warp-shuffle reduction (transform shuffle_reduce): {sh}[0] = the block's reduction, as the tree loop left it",
        "    __shared__ " + ty + " ptxf_warps[32];",
        f"    {ty} ptxf_v = {sh}[{t}];",
        "#pragma unroll",
        "    for (int ptxf_o = 16; ptxf_o > 0; ptxf_o >>= 1)",
        f"        ptxf_v = {_combine(red.op, 'ptxf_v', '__shfl_down_sync(0xffffffffu, ptxf_v, ptxf_o)')};",
        f"    if (({t} & 31u) == 0u) ptxf_warps[{t} >> 5] = ptxf_v;",
        "    __syncthreads();",
        f"    if ({t} < 32u) {{",
        "        const unsigned ptxf_n = blockDim.x >> 5;  // warps in the block (blockDim.x is a multiple of 32)",
        f"        ptxf_v = {t} < ptxf_n ? ptxf_warps[{t}] : ptxf_v;",
        "#pragma unroll",
        "        for (int ptxf_o = 16; ptxf_o > 0; ptxf_o >>= 1) {",
        f"            const {ty} ptxf_u = __shfl_down_sync(0xffffffffu, ptxf_v, ptxf_o);",
        f"            if ({t} + ptxf_o < ptxf_n) ptxf_v = {_combine(red.op, 'ptxf_v', 'ptxf_u')};",
        "        }",
        f"        if ({t} == 0u) {sh}[0] = ptxf_v;",
        "    }",
        "    __syncthreads();",
        "}",
    ]
    return lines[0] + "".join("\n" + ("" if ln.startswith("#") else indent) + ln for ln in lines[1:])


def _shared_arrays(body: Node) -> dict[str, str]:
    """``__shared__`` arrays declared in the kernel: name -> element type."""
    out = {}
    for n in sx.walk(body):
        if n.type != "declaration" or not any(c.type == "type_qualifier" and sx.text(c) == "__shared__" for c in n.children):
            continue
        base = sx.type_text(n.child_by_field_name("type"))
        for d in n.children_by_field_name("declarator"):
            if d.type == "array_declarator" and sx.is_ident(d.child_by_field_name("declarator")):
                out[sx.text(d.child_by_field_name("declarator"))] = base
    return out


def _tid_aliases(body: Node, builtin: str = "threadIdx") -> set[str]:
    """Names equal to ``threadIdx.x`` (``builtin``'s x: ``blockDim`` for the block's size) throughout: ``int tid =
    threadIdx.x;`` never written again."""
    written = sx.written_names(body)
    out = set()
    for n in sx.walk(body):
        if n.type == "init_declarator" and sx.is_ident(n.child_by_field_name("declarator")):
            if sx.is_builtin(n.child_by_field_name("value"), builtin):
                name = sx.text(n.child_by_field_name("declarator"))
                if name not in written:
                    out.add(name)
    counts = {}
    for n in sx.walk(body):  # declared once only
        if n.type == "init_declarator" and sx.is_ident(n.child_by_field_name("declarator")):
            counts[sx.text(n.child_by_field_name("declarator"))] = counts.get(sx.text(n.child_by_field_name("declarator")), 0) + 1
    return {a for a in out if counts.get(a) == 1}


def _is_block_size(node: Node | None, dims: set[str]) -> bool:
    """``blockDim.x`` or a never-written copy of it (``int nt = blockDim.x;``)."""
    node = sx.uncast(node)
    return sx.is_builtin(node, "blockDim") or (sx.is_ident(node) and sx.text(node) in dims)


def loop_body_root(node: Node) -> Node:
    """The kernel body (outermost compound statement) holding ``node``."""
    root = node
    while node is not None:
        if node.type == "compound_statement":
            root = node
        if node.type == "function_definition":
            break
        node = node.parent
    return root


def _is_tid(node: Node | None, aliases: set[str]) -> bool:
    node = sx.unparen(node)
    return sx.is_builtin(node, "threadIdx") or (sx.is_ident(node) and sx.text(node) in aliases)


def _is_sub(node: Node | None, sh: str, index_ok) -> bool:
    node = sx.unparen(node)
    if node is None or node.type != "subscript_expression" or not sx.is_ident(node.child_by_field_name("argument"), sh):
        return False
    idx = [c for c in node.child_by_field_name("indices").named_children if c.type != "comment"]
    return len(idx) == 1 and index_ok(idx[0])


def _match_loop(loop: Node, shared: dict[str, str], aliases: set[str], threads: int) -> Reduction | None:
    """The tree loop ``for (s = blockDim.x / 2; s > 0; s >>= 1) { if (tid < s) sh[tid] op= sh[tid + s]; __syncthreads(); }``
    of one shared array, or None."""
    tree = match_tree(loop, shared, aliases, threads)
    return tree[0] if tree is not None and len(tree) == 1 else None


def match_tree(loop: Node, shared: dict[str, str], aliases: set[str], threads: int) -> list[Reduction] | None:
    """The reductions of a tree loop, one per shared array it halves (``if (tid < s) { a[tid] += a[tid + s]; b[tid] =
    fmaxf(b[tid], b[tid + s]); }``: two, a LayerNorm's sum and sum of squares reduced together), in order; None when
    ``loop`` is not such a loop or names an array twice."""
    init, cond, upd, body = (loop.child_by_field_name(f) for f in ("initializer", "condition", "update", "body"))
    if init is None or cond is None or upd is None or body is None or init.type != "declaration":
        return None
    if threads & (threads - 1):
        return None  # (a block of 96 or 192: the halving tree drops elements; a rewrite would sum them all)
    ds = init.children_by_field_name("declarator")
    if len(ds) != 1 or ds[0].type != "init_declarator" or not sx.is_ident(ds[0].child_by_field_name("declarator")):
        return None
    s = sx.text(ds[0].child_by_field_name("declarator"))
    start = sx.unparen(ds[0].child_by_field_name("value"))
    dims = _tid_aliases(loop_body_root(loop), "blockDim")
    if not (
        (start.type == "binary_expression" and _is_block_size(start.child_by_field_name("left"), dims)
         and ((sx.operator(start) == "/" and sx.is_number(start.child_by_field_name("right"), 2))
              or (sx.operator(start) == ">>" and sx.is_number(start.child_by_field_name("right"), 1))))
        or sx.int_constant(start) == threads // 2  # a literal, or the block's #define expanded (512 / 2)
    ):
        return None
    cond = sx.unparen(cond)
    if not (cond.type == "binary_expression" and (
        (sx.is_ident(cond.child_by_field_name("left"), s) and sx.operator(cond) == ">" and sx.is_number(cond.child_by_field_name("right"), 0))
        or (sx.is_ident(cond.child_by_field_name("left"), s) and sx.operator(cond) == ">=" and sx.is_number(cond.child_by_field_name("right"), 1))
        or (sx.is_ident(cond.child_by_field_name("right"), s) and sx.operator(cond) == "<" and sx.is_number(cond.child_by_field_name("left"), 0))
    )):
        return None
    if not _halves(upd, s):
        return None
    stmts = sx.statements(body) if body.type == "compound_statement" else []
    if len(stmts) != 2 or not _is_barrier(stmts[1]) or stmts[0].type != "if_statement":
        return None
    guard = stmts[0]
    if guard.child_by_field_name("alternative") is not None:
        return None
    gc = sx.unparen(guard.child_by_field_name("condition").child_by_field_name("value"))
    if not (gc.type == "binary_expression" and (
        (sx.operator(gc) == "<" and _is_tid(gc.child_by_field_name("left"), aliases) and sx.is_ident(gc.child_by_field_name("right"), s))
        or (sx.operator(gc) == ">" and _is_tid(gc.child_by_field_name("right"), aliases) and sx.is_ident(gc.child_by_field_name("left"), s))
    )):
        return None
    cons = guard.child_by_field_name("consequence")
    updates = sx.statements(cons) if cons.type == "compound_statement" else [cons]
    out = []
    for u in updates:
        one = _tree_update(u, s, shared, aliases)
        if one is None or any(r.array == one[0] for r in out):
            return None
        out.append(Reduction(loop=loop, array=one[0], ctype=shared[one[0]], op=one[1]))
    return out or None


def _tree_update(stmt: Node, s: str, shared: dict[str, str], aliases: set[str]) -> tuple[str, str] | None:
    """``(array, op)`` of one step of a tree, ``sh[tid] += sh[tid + s];`` (``= sh[tid] + sh[tid + s]``, ``=
    fmaxf(sh[tid], sh[tid + s])``, ...), or None."""
    if stmt is None or stmt.type != "expression_statement" or stmt.named_child_count != 1:
        return None
    assign = stmt.named_children[0]
    if assign.type != "assignment_expression":
        return None
    left = assign.child_by_field_name("left")
    sh = sx.text(left.child_by_field_name("argument")) if left.type == "subscript_expression" else None
    if sh not in shared:
        return None
    here = lambda n: _is_sub(n, sh, lambda i: _is_tid(i, aliases))  # noqa: E731
    other = lambda n: _is_sub(n, sh, lambda i: _is_tid_plus(i, s, aliases))  # noqa: E731
    if not here(left):
        return None
    right = sx.unparen(assign.child_by_field_name("right"))
    op = None
    if sx.operator(assign) == "+=" and other(right):
        op = "+"
    elif sx.operator(assign) == "=":
        if right.type == "binary_expression" and sx.operator(right) == "+":
            a, b = right.child_by_field_name("left"), right.child_by_field_name("right")
            op = "+" if (here(a) and other(b)) or (other(a) and here(b)) else None
        elif sx.call_name(right) in MINMAX and len(sx.call_args(right)) == 2:
            a, b = sx.call_args(right)
            op = sx.call_name(right) if (here(a) and other(b)) or (other(a) and here(b)) else None
    return (sh, op) if op is not None else None


def _is_tid_plus(node: Node, s: str, aliases: set[str]) -> bool:
    node = sx.unparen(node)
    if node.type != "binary_expression" or sx.operator(node) != "+":
        return False
    a, b = node.child_by_field_name("left"), node.child_by_field_name("right")
    return (_is_tid(a, aliases) and sx.is_ident(sx.unparen(b), s)) or (_is_tid(b, aliases) and sx.is_ident(sx.unparen(a), s))


def _halves(upd: Node, s: str) -> bool:
    """``s /= 2``, ``s >>= 1``, ``s = s / 2`` or ``s = s >> 1``."""
    if upd.type != "assignment_expression" or not sx.is_ident(upd.child_by_field_name("left"), s):
        return False
    op, right = sx.operator(upd), sx.unparen(upd.child_by_field_name("right"))
    if op == "/=":
        return sx.is_number(right, 2)
    if op == ">>=":
        return sx.is_number(right, 1)
    if op == "=" and right.type == "binary_expression" and sx.is_ident(right.child_by_field_name("left"), s):
        return (sx.operator(right) == "/" and sx.is_number(right.child_by_field_name("right"), 2)) or (
            sx.operator(right) == ">>" and sx.is_number(right.child_by_field_name("right"), 1))
    return False


def _is_barrier(stmt: Node) -> bool:
    return (
        stmt.type == "expression_statement" and stmt.named_child_count == 1
        and sx.call_name(stmt.named_children[0]) == "__syncthreads" and not sx.call_args(stmt.named_children[0])
    )


def _later_reads_only_first(body: Node, red: Reduction, aliases: set[str]) -> bool:
    """After the loop (wrapping around an enclosing loop), ``sh`` is only read at ``[0]`` until ``sh[t] = ...`` rewrites it."""
    occurrences = [n for n in sx.walk(body) if sx.is_ident(n, red.array)
                   and not (n.parent is not None and n.parent.type == "array_declarator")]
    after = [n for n in occurrences if n.start_byte >= red.loop.end_byte]
    outer = None
    p = red.loop.parent
    while p is not None and p != body:
        if p.type in sx.LOOPS:
            outer = p
        p = p.parent
    if outer is not None:
        after += [n for n in occurrences if outer.start_byte <= n.start_byte < red.loop.start_byte]
    for n in after:
        access = n.parent
        if access is None or access.type != "subscript_expression":
            return False
        idx = [c for c in access.child_by_field_name("indices").named_children if c.type != "comment"]
        parent = access.parent
        while parent is not None and parent.type == "parenthesized_expression":
            parent = parent.parent
        is_store = parent is not None and parent.type == "assignment_expression" and parent.child_by_field_name("left") == access
        if is_store:
            return sx.operator(parent) == "=" and len(idx) == 1 and _is_tid(idx[0], aliases)
        if len(idx) != 1 or not sx.is_number(idx[0], 0) or (parent is not None and parent.type in ("update_expression", "pointer_expression")):
            return False
    return True
