"""``coarsen_outer_K``: a 2-D or 3-D launch gives each thread ``K`` consecutive indices of its outermost grid axis.

Pattern (a top-level declaration of the outer index, ``y`` of a 2-D grid or ``z`` of a 3-D one)::

    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;       // or: int z = blockIdx.z;
    if (row >= H || col >= W) return;
    ...rest...

becomes (the outer grid extent ``G`` rendered in the kernel's own scalars; the rows a thread takes are consecutive,
so what row ``r + 1`` reads of row ``r``'s neighbours, a stencil's vertical or a 3-D stencil's z taps, is one
expression of one thread, which the compiler loads once where the buffers cannot alias: chained after ``restrict``)::

    int col = blockIdx.x * blockDim.x + threadIdx.x;
    {
        const long long ptxf_ob = ((long long)blockIdx.y * blockDim.y + threadIdx.y) * K;   // the thread's first row
        const long long ptxf_on = (long long)(G) * blockDim.y;                               // rows the original covered
        if (ptxf_ob + K <= ptxf_on) {
    #pragma unroll
            for (int ptxf_o = 0; ptxf_o < K; ++ptxf_o) { int row = (int)(ptxf_ob + ptxf_o); ...rest, return -> continue... }
        } else {
            for (int ptxf_o = 0; ptxf_o < K && ptxf_ob + ptxf_o < ptxf_on; ++ptxf_o) { ... }
        }
    }

A top-level exit guard whose condition is upper bounds on the index plus parts read from the parameters and the names
declared before the index (``if (x >= W || row >= H) return;``) is tested once, for the thread's last index, in the
full path's condition, and dropped from its rows: they run without control flow between them, so what one row loads
of a stencil's neighbours the compiler may reuse in the next. The grid's outer extent becomes ``cdiv(G, K)``; the
block stays. A top-level border choice (``if (i == 0 || j == 0 || i == H - 1 || j == W - 1) edge else
interior``, or that choice as a conditional value, which ``selects`` and ``early_exit`` make of a border's early
return) whose condition is an ``||`` of comparisons of the index with values the same for all of a thread's indices
and of parts free of it, reading only parameters and names declared before the index (:func:`_borders`), is tested
once more, before that path: where it is false for the thread's first and last index at the end that decides each
comparison (``i == 0``: 0 outside them; ``i <= 0``: the first; ``i >= H - 1``: the last), the rows run the interior
alone, one expression each, so a stencil's vertical (or a 3-D stencil's z) taps are shared between rows by the
compiler. Every (row, col) the original computed is computed
once, by one thread, with the same code: exact. A ``return`` of the rest (the guard's, an early exit) ends only that
row: ``continue``. What it buys: ``K`` rows' loads in flight per thread, the work of the indices above the outer one
(the column's, declared before it) done once, and a stencil's taps shared between a thread's rows; what it costs:
``K`` times fewer blocks (the search times both).

Refused, with the reason (:meth:`OuterCoarsenPass.why_not`): a launch policy other than ``"free"``; a 1-D grid
(``coarsen``'s); no top-level declaration of the outer index (``T v = blockIdx.a;`` or ``blockIdx.a * blockDim.a +
threadIdx.a``, casts allowed); the outer axis's ``blockIdx``/``threadIdx``/``blockDim``/``gridDim`` read anywhere
else; the index, a parameter or a name declared before the index written in the rest (a pointer bumped to its row:
it would move once per index); in the rest, a lambda, a barrier, a warp collective, ``__shared__``/``static`` data, ``goto`` or a
label, a ``return`` inside a loop or ``switch``, or a loop other than a short one between literal bounds (a thread
per row must not take ``K`` rows); a grid extent with no C form in the kernel's scalars; a 32-bit index that could
overflow at a spec size.
"""
from __future__ import annotations

from dataclasses import dataclass

from ptxfactory.harness.cexpr import as_condition
from ptxfactory.protocol import LaunchConfig
from ptxfactory.protocol.expr import ExprError, evaluate, to_c

from ...base import size_names

from . import syntax as sx
from .base import Unit, int_literal
from .opening import BUILTINS
from .coarsen import MAX_BLOCK, _short_loop
from .syntax import Node

FACTORS = (4, 8)  # outer indices per thread of the variants the registry holds


class OuterCoarsenPass:
    """A 2-D/3-D launch -> ``k`` consecutive outer-axis indices per thread, the outer grid extent ``cdiv(G, k)``."""

    group = "outer"  # optional: its chains are proposed with and without it (fewer blocks may cost more than it buys)
    exact = True

    def __init__(self, k: int, middle: bool = False):
        """``k`` indices a thread; ``middle``: of the y axis of a 3-D launch (``coarsen_y_K``: unflatten's output rows
        of a convolution or a pooling, which share input rows; z holds the images and channels, which share none)."""
        if k not in FACTORS:
            raise ValueError(f"coarsen_outer: indices per thread must be one of {FACTORS}, not {k!r}")
        self.k, self.middle = k, middle
        self.name = f"coarsen_y_{k}" if middle else f"coarsen_outer_{k}"
        self.kind = "coarsen_y" if middle else "coarsen_outer"  # (covering_order: two kinds of one class)

    def _match(self, unit: Unit) -> tuple[dict | None, str | None]:
        """``(reading, None)`` when the pass applies, else ``(None, reason)``."""
        if unit.body is None:
            return None, "no kernel body to read (the text does not parse as a kernel, or a macro could not be expanded)"
        if unit.spec.launch.policy != "free":
            return None, f'the launch policy is "{unit.spec.launch.policy}", not "free": the grid may not change'
        grid = [str(g).strip() for g in unit.launch.grid]
        while len(grid) > 1 and grid[-1] == "1":
            grid = grid[:-1]
        if len(grid) < 2:
            return None, "the grid is 1-D (coarsen's, not coarsen_outer's)"
        if self.middle and len(grid) != 3:
            return None, "the grid is not 3-D (a 2-D grid's y is coarsen_outer's)"
        axis = "y" if self.middle else "yz"[len(grid) - 2]
        dim = "xyz".index(axis)  # the grid and block dimension coarsened
        stmts = sx.statements(unit.body)
        at = next((i for i, s in enumerate(stmts) if _outer_decl(s, axis) is not None), None)
        if at is None:
            return None, (f"no top-level declaration of the outer index (T v = blockIdx.{axis}; or blockIdx.{axis} * "
                          f"blockDim.{axis} + threadIdx.{axis};)")
        name, type_node, thread = _outer_decl(stmts[at], axis)
        why = repeated_index_refusal(unit, stmts, at, axis, "outer index", "index")
        if why:
            return None, why
        rest = stmts[at + 1:]
        short = _short_loop(unit)
        for stmt in rest:
            why = repeat_hazard(stmt, short)
            if why:
                return None, f"line {stmt.start_point[0] + 1}: {why}"
        names = size_names(unit.spec)
        try:
            bound = to_c(grid[dim], names)
        except ExprError as exc:
            return None, f"the grid's {axis} extent {grid[dim]!r} has no C form in the kernel's scalars ({exc})"
        ctype = sx.type_text(type_node)
        if ctype not in sx.INT_TYPES:
            return None, f"the outer index's type {ctype!r} is not an integer type the pass knows"
        if ctype not in sx.WIDE_INT_TYPES:
            block = int_literal(unit.launch.block[dim]) if len(unit.launch.block) > dim else 1
            threads = (block or MAX_BLOCK) if thread else 1
            for size in unit.spec.check.sizes + unit.spec.bench.sizes:
                try:
                    blocks = int(evaluate(grid[dim], size))
                except ExprError:
                    return None, f"the grid {grid[dim]!r} cannot be evaluated at the size {dict(size)}"
                if (-(-blocks // self.k) * self.k + self.k) * threads > 2**31 - 1:
                    return None, f"a 32-bit outer index ({ctype}) could overflow at the size {dict(size)}"
        return {"axis": axis, "decl": stmts[at], "name": name, "type": ctype, "thread": thread, "rest": rest,
                "bound": bound, "dims": dim + 1, "guards": _monotone_guards(unit, stmts, at, name),
                "borders": _borders(unit, stmts, at, name)}, None

    def why_not(self, unit: Unit) -> str | None:
        """Why the pass refuses ``unit`` (None when it applies)."""
        return self._match(unit)[1]

    def maybe(self, unit: Unit) -> bool:
        """Whether a chain could bring the pass to apply (plan_chains): a launch of enough dimensions, or a flat index
        that unflatten takes apart into one."""
        grid = [str(g).strip() for g in unit.launch.grid]
        while len(grid) > 1 and grid[-1] == "1":
            grid = grid[:-1]
        if len(grid) >= (3 if self.middle else 2):
            return True
        from .unflatten import UnflattenPass
        return UnflattenPass().applies(unit)

    def applies(self, unit: Unit) -> bool:
        return self.why_not(unit) is None

    def apply(self, unit: Unit) -> Unit:
        m, reason = self._match(unit)
        if m is None:
            raise ValueError(f"{self.name} does not apply: {reason}")
        data, k, a, t, v = unit.data, self.k, m["axis"], m["type"], m["name"]
        rest = m["rest"]
        # each return that leaves the kernel ends this outer index only (none is inside a loop or switch: repeat_hazard)
        edits = [(n.start_byte, n.end_byte, b"continue;") for s in rest for n in sx.walk(s) if n.type == "return_statement"]
        body = _text(data, rest, edits)
        # the full path: the guards that hold for every index a thread takes when they hold for its last one are
        # tested once, and its rows run without them (what one row loads of a stencil's neighbours, the next may reuse)
        last = f"({t})(ptxf_ob + {k - 1})"
        guards = m["guards"]
        full_cond = "".join(f" && !({_substituted(data, g.child_by_field_name('condition'), v, last)})" for g in guards)
        dropped = [(g.start_byte, g.end_byte, b"") for g in guards]
        full_body = _text(data, rest, dropped + [e for e in edits if not any(g[0] <= e[0] < g[1] for g in dropped)])
        # the interior path: a border choice (if/else, or a conditional value) whose condition is false for every index
        # of the thread, by a test of its first and last, runs its interior alone (a stencil's rows then share taps)
        borders = m["borders"]
        first_i = f"({t})(ptxf_ob)"
        inner_cond = "".join(f" && {_interior_test(data, b.cond, v, first_i, last, t)}" for b in borders)
        def interior(b: Border) -> bytes:  # the interior's text, its returns this index's continue
            lo, hi = b.interior.start_byte, b.interior.end_byte
            text = sx.apply_edits(data[lo:hi], [(x - lo, y - lo, r) for x, y, r in edits if lo <= x < hi])
            return b"(" + text + b")" if b.kind == "select" else text

        inner_edits = dropped + [(b.node.start_byte, b.node.end_byte, interior(b)) for b in borders]
        inner_edits += [e for e in edits if not any(a <= e[0] < z for a, z, _ in inner_edits)]
        interior_body = _text(data, rest, inner_edits)
        ind = sx.line_indent(data, m["decl"].start_byte)[0].decode()
        inner = ind + " " * 12
        body = body.replace("\n", "\n" + " " * 12)
        full_body = full_body.replace("\n", "\n" + " " * 12)
        interior_body = interior_body.replace("\n", "\n" + " " * 12)
        first = (f"((long long)blockIdx.{a} * blockDim.{a} + threadIdx.{a}) * {k}" if m["thread"]
                 else f"(long long)blockIdx.{a} * {k}")
        covered = f"({m['bound']}) * blockDim.{a}" if m["thread"] else f"({m['bound']})"
        index = f"const {t} {v} = ({t})(ptxf_ob + ptxf_o);"
        lines = [
            f"{{   // coarsen_outer (transform): {k} consecutive {a} indices per thread",
            f"{ind}    const long long ptxf_ob = {first};",
            f"{ind}    const long long ptxf_on = {covered};  // the {a} indices the original launch covered",
            *([f"{ind}    if (ptxf_ob + {k} <= ptxf_on{full_cond}{inner_cond}) {{  // every index inside the border",
               "#pragma unroll",
               f"{ind}        for (int ptxf_o = 0; ptxf_o < {k}; ++ptxf_o) {{",
               f"{inner}{index}",
               f"{inner}{interior_body}",
               f"{ind}        }}",
               f"{ind}    }} else"] if borders else []),
            f"{ind}    if (ptxf_ob + {k} <= ptxf_on{full_cond}) {{",
            "#pragma unroll",
            f"{ind}        for (int ptxf_o = 0; ptxf_o < {k}; ++ptxf_o) {{",
            f"{inner}{index}",
            f"{inner}{full_body}",
            f"{ind}        }}",
            f"{ind}    }} else {{",
            f"{ind}        for (int ptxf_o = 0; ptxf_o < {k} && ptxf_ob + ptxf_o < ptxf_on; ++ptxf_o) {{",
            f"{inner}{index}",
            f"{inner}{body}",
            f"{ind}        }}",
            f"{ind}    }}",
            f"{ind}}}",
        ]
        text = sx.apply_edits(data, [(m["decl"].start_byte, rest[-1].end_byte, "\n".join(lines).encode())])
        grid = [str(g) for g in unit.launch.grid]
        grid[m["dims"] - 1] = f"cdiv({grid[m['dims'] - 1]}, {k})"
        launch = LaunchConfig(grid=grid, block=list(unit.launch.block), shared_mem=unit.launch.shared_mem)
        return unit.with_text(text, launch=launch)


def _outer_decl(stmt: Node, axis: str) -> tuple[str, Node, bool] | None:
    """``(name, type node, thread part)`` of ``T v = blockIdx.axis;`` (False) or ``T v = blockIdx.axis * blockDim.axis +
    threadIdx.axis;`` in any order (True), one declarator, casts allowed; else None."""
    if stmt.type != "declaration":
        return None
    ds = stmt.children_by_field_name("declarator")
    if len(ds) != 1 or ds[0].type != "init_declarator" or not sx.is_ident(ds[0].child_by_field_name("declarator")):
        return None
    if any(c.type in ("type_qualifier", "storage_class_specifier") and sx.text(c) != "const" for c in stmt.children):
        return None
    name, value = sx.text(ds[0].child_by_field_name("declarator")), ds[0].child_by_field_name("value")
    if sx.is_builtin(value, "blockIdx", axis):
        return name, stmt.child_by_field_name("type"), False
    e = sx.uncast(value)
    if e is None or e.type != "binary_expression" or sx.operator(e) != "+":
        return None
    left, right = e.child_by_field_name("left"), e.child_by_field_name("right")
    if sx.is_builtin(left, "threadIdx", axis):
        left, right = right, left
    if not sx.is_builtin(right, "threadIdx", axis):
        return None
    prod = sx.uncast(left)
    if prod is None or prod.type != "binary_expression" or sx.operator(prod) != "*":
        return None
    fs = (prod.child_by_field_name("left"), prod.child_by_field_name("right"))
    if not ({v for f in fs for v in ("blockIdx", "blockDim") if sx.is_builtin(f, v, axis)} == {"blockIdx", "blockDim"}):
        return None
    return name, stmt.child_by_field_name("type"), True


def repeat_hazard(stmt: Node, short_loop) -> str | None:
    """Why ``stmt``, after a thread's index, may not run for several values of that index in one thread (None when it
    may): a loop ``short_loop`` does not accept, a lambda, ``goto`` or a label, a ``return`` inside a loop or ``switch``,
    a barrier or warp collective, ``__shared__`` or ``static`` data."""
    for n in sx.walk(stmt):
        if n.type in sx.LOOPS and not short_loop(n):
            return "a loop that is not a short one between literal bounds (a thread per row must not take several rows)"
        if n.type == "lambda_expression":
            return "a lambda (its returns are its own, not the index's)"
        if n.type in ("goto_statement", "labeled_statement"):
            return f"{n.type.removesuffix('_statement').replace('_', ' ')} ({sx.text(n)[:40]!r})"
        if n.type == "return_statement":
            p = n.parent
            while p is not None and p != stmt.parent:
                if p.type in sx.LOOPS or p.type == "switch_statement":
                    return "a return inside a loop or switch (it cannot become this index's continue)"
                p = p.parent
        if n.type == "call_expression" and sx.call_name(n) in sx.COLLECTIVES:
            kind = "a barrier" if sx.call_name(n) in sx.BARRIERS else "a warp collective"
            return f"{kind} ({sx.call_name(n)}): the threads of a block would reach it a different number of times"
        if n.type in ("type_qualifier", "storage_class_specifier") and sx.text(n) in ("__shared__", "static"):
            return f"{sx.text(n)} data"
    return None


def repeated_index_refusal(unit: Unit, stmts: list[Node], at: int, axis: str, what: str, one: str) -> str | None:
    """Why the statements after ``stmts[at]``, the declaration of a thread's index along ``axis`` (``what``: "outer
    index", "x index"), may not run for several values of that index in one thread (each value ``one``: "index",
    "element"), None when they may: the axis's builtins read again, the index written, nothing after it, or a
    parameter or a name declared before the index written after it (a row pointer bumped: it would move once per
    value)."""
    decl = stmts[at]
    for n in sx.walk(unit.body):
        if n.type == "field_expression" and not (decl.start_byte <= n.start_byte < decl.end_byte) and any(
                sx.is_builtin(n, v, axis) for v in ("blockIdx", "threadIdx", "blockDim", "gridDim")):
            return f"line {n.start_point[0] + 1}: {sx.text(n)} is read past the {what}'s declaration"
    name = _outer_decl(decl, axis)[0]
    if name in sx.written_names(unit.body):
        return f"the {what} {name!r} is written"
    rest = stmts[at + 1:]
    if not rest:
        return f"nothing after the {what}"
    outside = _declared_outside(unit, stmts[:at])
    through = _written_through_roots(outside - _param_names(unit), stmts[:at])
    # a lambda may write what it captures by reference, whenever it is called
    in_lambdas = set().union(*(sx.written_names(n) for n in sx.walk(unit.body) if n.type == "lambda_expression"))
    for stmt in rest:
        written = (sx.written_names(stmt) | _written_through(stmt, through) | in_lambdas
                   | _passed_to_calls(stmt, outside - _param_names(unit))) & outside
        if written:
            return (f"line {stmt.start_point[0] + 1}: the code after the {what} writes {', '.join(sorted(written))}, "
                    f"declared before it: it would be updated once per {one} a thread takes")
        for n in sx.walk(stmt):
            if n.type == "reference_declarator" or (n.type == "init_declarator" and sx.contains_type(
                    n.child_by_field_name("declarator"), ("reference_declarator",))):
                return f"line {n.start_point[0] + 1}: a reference declared after the {what} (what it binds may be written)"
    return None


def _passed_to_calls(stmt: Node, locals_before: set[str]) -> set[str]:
    """The names ``stmt`` passes by address to a call (``f(&n)``), and the locals of ``locals_before`` it passes bare to
    a call that is no value function (``setl(top, 8)``: a reference parameter may write it)."""
    out = set()
    for n in sx.walk(stmt):
        if n.type != "call_expression" or sx.call_name(n) in sx.VALUE_FUNCS:
            continue
        for a in sx.call_args(n):
            a = sx.unparen(a)
            if a is not None and a.type == "pointer_expression" and sx.operator(a) == "&":
                root, through_element = sx.unparen(a.child_by_field_name("argument")), False
                while root is not None and root.type in ("subscript_expression", "field_expression"):
                    through_element |= root.type == "subscript_expression"
                    root = sx.unparen(root.child_by_field_name("argument"))
                # &n, &st.h: the variable itself; &p[i]: an element p points at (a buffer's, unless p is a local array)
                if sx.is_ident(root) and (not through_element or sx.text(root) in locals_before):
                    out.add(sx.text(root))
            elif sx.is_ident(a) and sx.text(a) in locals_before:
                out.add(sx.text(a))
    return out


def _param_names(unit: Unit) -> set[str]:
    return sx.declared_names(sx.function_declarator(unit.fn).child_by_field_name("parameters"))


def _written_through_roots(locals_before: set[str], before: list[Node]) -> tuple[set[str], set[str]]:
    """``(locals_before, held)``: the locals declared before the index (by the statements ``before``), and of them the
    arrays and the pointers whose value takes an address (``int* lp = &lim;``: they may point at another local)."""
    addressing = {sx.text(sx.innermost_identifier(d)) for s in before for d in sx.walk(s)
                  if d.type == "init_declarator" and sx.innermost_identifier(d) is not None
                  and any(c.type == "pointer_expression" and sx.operator(c) == "&" for c in sx.walk(d.child_by_field_name("value") or d))}
    arrays = {sx.text(sx.innermost_identifier(d)) for s in before for d in sx.walk(s)
              if d.type == "array_declarator" and sx.innermost_identifier(d) is not None}
    return locals_before, addressing | arrays


def _written_through(stmt: Node, through: tuple[set[str], set[str]]) -> set[str]:
    """The locals declared before the index that ``stmt`` writes through a field, an element or a dereference
    (``s.h = 13``, ``acc[0] += v``, ``*lp = 13``): a struct's, or an array's or pointer's of ``through``'s ``held``
    (:func:`_written_through_roots`). A store through a local pointer into a buffer (``float* row = y + r * W;``) is
    a store to memory, not to the local."""
    locals_before, held = through
    out = set()
    for n in sx.walk(stmt):
        target = None
        if n.type == "assignment_expression":
            target = n.child_by_field_name("left")
        elif n.type == "update_expression":
            target = n.child_by_field_name("argument")
        target = sx.unparen(target)
        if target is None or target.type not in ("field_expression", "subscript_expression", "pointer_expression"):
            continue
        root = target
        while root is not None and root.type in ("field_expression", "subscript_expression", "pointer_expression",
                                                 "parenthesized_expression"):
            root = root.child_by_field_name("argument") if root.type != "parenthesized_expression" else sx.unparen(root)
        if not sx.is_ident(root) or sx.text(root) not in locals_before:
            continue
        name = sx.text(root)
        if target.type == "field_expression" or name in held:
            out.add(name)
    return out


def _monotone_guards(unit: Unit, stmts: list[Node], at: int, v: str) -> list[Node]:
    """The top-level exit guards of the code after the index ``v`` (``if (cond) return;``) whose condition is upper
    bounds on ``v`` plus parts read from the parameters and the names declared before the index only
    (:func:`guard_refusal`), loads and calls but value functions excluded: evaluated for a thread's last index, each
    says whether it leaves any of them."""
    rest = stmts[at + 1:]
    inside = set().union(*(sx.declared_names(s) for s in rest))
    known = _stable_names(unit, stmts, at) | {v} | BUILTINS
    out = []
    for s in rest:
        if s.type != "if_statement" or s.child_by_field_name("alternative") is not None:
            continue
        cons = s.child_by_field_name("consequence")
        body = sx.statements(cons) if cons.type == "compound_statement" else [cons]
        if len(body) != 1 or body[0].type != "return_statement" or body[0].named_child_count:
            continue
        cond = sx.unparen(s.child_by_field_name("condition").child_by_field_name("value"))
        calls = [n for n in sx.walk(cond) if n.type == "call_expression" and sx.call_name(n) not in sx.VALUE_FUNCS]
        if (calls or sx.contains_type(cond, ("subscript_expression", "pointer_expression", "assignment_expression",
                                             "update_expression"))
                or sx.identifiers(cond) - known - set(sx.VALUE_FUNCS)
                or guard_refusal(cond, v, inside, "exit", "outer index") is not None):
            continue
        out.append(s)
    return out


@dataclass(frozen=True)
class Border:
    """A border choice of the code after the index: ``if (cond) edge else interior`` (``kind`` "if", ``node`` the if
    statement) or ``L = (cond) ? edge : interior;`` (``kind`` "select", ``node`` the conditional expression)."""

    kind: str
    node: Node
    cond: Node
    interior: Node


_COMPARE = frozenset({"==", "<", "<=", ">", ">="})
_MIRROR = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "=="}


def _borders(unit: Unit, stmts: list[Node], at: int, v: str) -> list[Border]:
    """The top-level border choices after the index ``v`` whose condition is an ``||`` of comparisons of ``v`` with
    values the same for all of a thread's indices (``v == 0``, ``v >= H - 1``) and of parts free of ``v`` (``x == 0``),
    each reading only parameters and names declared before the index, no memory, no call but value functions: the
    condition is false for every index from a first to a last when each comparison is false at the one end that
    decides it (:func:`_interior_test`)."""
    rest = stmts[at + 1:]
    ctype = sx.type_text(stmts[at].child_by_field_name("type"))
    known = _stable_names(unit, stmts, at) | {v} | BUILTINS
    out = []
    for s in rest:
        if s.type == "if_statement" and s.child_by_field_name("alternative") is not None:
            alt = s.child_by_field_name("alternative")
            alt = next((c for c in alt.named_children if c.type != "comment"), None) if alt.type == "else_clause" else alt
            cond = sx.unparen(s.child_by_field_name("condition").child_by_field_name("value"))
            if alt is not None and _border_cond(cond, v, known, ctype):
                out.append(Border("if", s, cond, alt))
        elif s.type == "expression_statement" and s.named_child_count == 1 and s.named_children[0].type == "assignment_expression":
            value = sx.unparen(s.named_children[0].child_by_field_name("right"))
            if value is not None and value.type == "conditional_expression":
                cond = as_condition(value.child_by_field_name("condition"))  # (read as text: a misparse read again)
                if _border_cond(cond, v, known, ctype):
                    out.append(Border("select", value, cond, value.child_by_field_name("alternative")))
    return out


def _stable_names(unit: Unit, stmts: list[Node], at: int) -> set[str]:
    """The names a border condition may read as the same for all of a thread's indices: the parameters and the names
    the top-level statements before the index declare (not a nested scope's), minus any the code after the index
    declares again, and any passed bare or by address to a call that is no value function or read in a lambda (a call
    may write them: ``set_top(8)`` through a captured reference)."""
    names = _param_names(unit) | {x for st in stmts[:at] if st.type == "declaration" for x in sx.declared_names(st)}
    names -= set().union(*(sx.declared_names(st) for st in stmts[at + 1:])) if stmts[at + 1:] else set()
    for n in sx.walk(unit.body):
        if n.type == "lambda_expression":
            names -= sx.identifiers(n)
        elif n.type == "call_expression" and sx.call_name(n) not in sx.VALUE_FUNCS:
            for a in sx.call_args(n):
                a = sx.unparen(a)
                if a is not None and a.type == "pointer_expression" and sx.operator(a) == "&":
                    a = sx.unparen(a.child_by_field_name("argument"))
                if sx.is_ident(a):
                    names.discard(sx.text(a))
    return names


def _index_operand(node: Node | None, v: str, ctype: str | None) -> bool:
    """``node`` is the index ``v`` itself, in parentheses or cast to its own type ``ctype`` or a 64-bit integer one
    (a narrowing cast, ``(unsigned char)i``, wraps: a comparison through it is not monotone in the index)."""
    node = sx.unparen(node)
    while node is not None and node.type == "cast_expression":
        t = sx.type_text(node.child_by_field_name("type").child_by_field_name("type")
                         if node.child_by_field_name("type").type == "type_descriptor" else node.child_by_field_name("type"))
        if t != ctype and t not in sx.WIDE_INT_TYPES:
            return False
        node = sx.unparen(node.child_by_field_name("value"))
    return sx.is_ident(node, v)


def _border_cond(cond: Node | None, v: str, known: set[str], ctype: str) -> bool:
    """``cond`` is an ``||`` of comparisons of ``v`` with a value free of it, and parts free of ``v``, each reading
    only ``known`` names, no memory, and calling only value functions; at least one part compares ``v``."""
    if cond is None:
        return False
    compares = 0
    for part in sx.operands(cond, "||"):
        if (sx.contains_type(part, ("subscript_expression", "pointer_expression", "assignment_expression",
                                    "update_expression", "field_expression"))
                or any(n.type == "call_expression" and sx.call_name(n) not in sx.VALUE_FUNCS for n in sx.walk(part))
                or sx.identifiers(part) - known - set(sx.VALUE_FUNCS)):
            return False
        if v not in sx.identifiers(part):
            continue
        if _comparison(part, v, ctype) is None:
            return False
        compares += 1
    return compares > 0


def _comparison(part: Node, v: str, ctype: str) -> tuple[str, Node] | None:
    """``(op, e)`` for a part ``v op e`` (``e op v`` mirrored; ``v`` of type ``ctype`` cast only to its own type or a
    wider integer one: :func:`_index_operand`), ``e`` free of ``v``; else None."""
    p = sx.unparen(part)
    if p is None or p.type != "binary_expression" or sx.operator(p) not in _COMPARE:
        return None
    left, right, op = p.child_by_field_name("left"), p.child_by_field_name("right"), sx.operator(p)
    if _index_operand(left, v, ctype) and v not in sx.identifiers(right):
        return op, right
    if _index_operand(right, v, ctype) and v not in sx.identifiers(left):
        return _MIRROR[op], left
    return None


def _interior_test(data: bytes, cond: Node, v: str, first: str, last: str, ctype: str) -> str:
    """The C test that ``cond`` (:func:`_border_cond`) is false for every index from ``first`` to ``last``: a part
    free of ``v`` false; ``v == e``: e outside them; ``v < e``, ``v <= e``: false at the first; ``v > e``, ``v >= e``:
    false at the last."""
    tests = []
    for part in sx.operands(cond, "||"):
        if v not in sx.identifiers(part):
            tests.append(f"!({sx.text(part)})")
            continue
        op, e = _comparison(part, v, ctype)
        e_text = f"({sx.text(e)})"
        if op == "==":
            tests.append(f"({e_text} < {first} || {e_text} > {last})")
        elif op in ("<", "<="):
            tests.append(f"!({first} {op} {e_text})")
        else:
            tests.append(f"!({last} {op} {e_text})")
    return "(" + " && ".join(tests) + ")"


def _text(data: bytes, rest: list[Node], edits: list[tuple[int, int, bytes]]) -> str:
    """The text of the statements ``rest`` with ``edits`` (byte offsets in ``data``) applied."""
    lo = rest[0].start_byte
    return sx.apply_edits(data[lo:rest[-1].end_byte], [(a - lo, b - lo, r) for a, b, r in edits]).decode()


def _substituted(data: bytes, node: Node, name: str, by: str) -> str:
    """``node``'s text with the identifier ``name`` replaced by ``by``."""
    return sx.render(node, data, lambda n: f"({by})".encode() if n.type == "identifier" and sx.text(n) == name else None).decode()


def _declared_outside(unit: Unit, before: list[Node]) -> set[str]:
    """The kernel's parameters and the names declared by the statements ``before`` the index: what a loop the pass
    wraps around the rest must not write."""
    params = sx.function_declarator(unit.fn).child_by_field_name("parameters")
    out = sx.declared_names(params)
    for s in before:
        out |= sx.declared_names(s)
    return out


_UPPER_EXIT = {">=": "left", ">": "left", "<=": "right", "<": "right"}  # j >= B, j > B, B <= j, B < j: j on that side
_UPPER_KEEP = {"<": "left", "<=": "left", ">": "right", ">=": "right"}  # j < B, j <= B, B > j, B >= j


def guard_refusal(cond: Node, j: str, dependent: set[str], kind: str, what: str) -> str | None:
    """Why a guard's condition (``kind`` "exit": ``if (cond) return;``, "keep": ``if (cond) {...}``) is not upper bounds
    on the index ``j`` (``what``: its name in the reason) plus parts that read neither ``j`` nor the ``dependent``
    locals (the same for a thread's consecutive values of ``j``): where it is, the guard holds for all of them when
    it holds for the last, None."""
    parts = sx.operands(cond, "||" if kind == "exit" else "&&")
    table = _UPPER_EXIT if kind == "exit" else _UPPER_KEEP
    for part in parts:
        names = sx.identifiers(part)
        if names & dependent:
            return f"the guard's part {sx.text(part)!r} reads a local derived from the {what}"
        if j not in names:
            continue
        p = sx.unparen(part)
        side = table.get(sx.operator(p)) if p.type == "binary_expression" else None
        if side is None or not _index_operand(p.child_by_field_name(side), j, None) or j in sx.identifiers(
                p.child_by_field_name("right" if side == "left" else "left")):
            return f"the guard's part {sx.text(part)!r} is not an upper bound on the {what}"
    return None
