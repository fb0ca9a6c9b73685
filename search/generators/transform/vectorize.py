"""``vectorize``: a 1-D elementwise kernel moves 16 bytes per load and store, one thread per 16 bytes.

Pattern (the kernel body is exactly this; casts and either operand order allowed in the index)::

    T i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;            // or: if (i < n) { ... } as the last statement
    ...rest...                     // y[i] = f(x[i], z[i], ...): every buffer access is p[i]

Each thread then handles ``VEC = 16 / sizeof(E)`` consecutive elements from ``i0 = i * VEC`` (E:
``float``, ``__half`` or ``__nv_bfloat16``; with buffers of both sizes, a mixed-precision kernel, E is the widest:
its buffers move 16 bytes, the 2-byte ones 8, as ``uint2``)::

    const T ptxf_v0 = (T)(blockIdx.x * blockDim.x + threadIdx.x) * VEC;
    if (ptxf_v0 >= n) return;
    if (ptxf_v0 + VEC <= n && ((addr(x) | addr(z) | addr(y)) & 15) == 0) {   // aligned: uniform
        uint4 ptxf_x = *reinterpret_cast<const uint4*>(x + ptxf_v0); ...      // one 16-byte load each
        { <rest>, x[i] -> element 0 of ptxf_x, y[i] = v -> ptxf_y0 = bits of (E)(v) } ... x VEC
        *reinterpret_cast<uint4*>(y + ptxf_v0) = make_uint4(...);             // one 16-byte store
    } else {
        for (T i = ptxf_v0; i < ptxf_v0 + VEC && i < n; ++i) { <rest> }       // tail / misaligned
    }

and the grid ``cdiv(N, B)`` becomes ``cdiv(N, B * VEC)``. Reads already routed through ``__ldg``,
``__ldcs`` or the ``ldg_na`` helper (``f(p + i)``) keep their hint on the 16-byte load, and stores
through ``__stcs(q + i, v)`` on the 16-byte store, so the pass chains after the hint passes.
Exact: every element runs the same statements on the same values; only the access width changes.

Preconditions: a 1-D literal block of B threads, grid ``cdiv(N, B)`` (N any expression of the sizes), launch
policy ``"free"``; the guard's bound is scalar parameters whose spec values give N at every size (``n``, ``batch * dim``;
casts allowed), and every
buffer accessed holds at least N elements at the spec's sizes; ``rest`` is straight-line code (no
branch or loop statements, no ``return``, barrier, warp collective, ``__shared__`` data or thread
builtins) that does not write ``i`` or ``n``; each buffer is only read, or written by exactly one
top-level ``y[i] = v;`` statement (reads of it before that store allowed; ``y[i] op= v;`` is read as ``y[i] = y[i] op
(v);``, what it means: :func:`plain_stores`); no other pointer use;
a 32-bit index does not overflow at the spec's sizes; a buffer moved 8 bytes at a time takes no ``ldg_na`` hint.
Where one fails, ``why_not`` says which, for the job's report (``x[i + 1] is not x[i] at the thread's index (vectorize_x
may take it)``, ``the grid 'cdiv(M * N, 256)' is not cdiv(N, 256) ...``, ``a branch in the element's code``); the pass is
no restructuring one for the plan's order (``restructures = False``).
"""
from __future__ import annotations

import ast

from ptxfactory.protocol import LaunchConfig
from ptxfactory.protocol.expr import ExprError, evaluate

from . import syntax as sx
from .base import PointerParam, Unit, other_use, use_site
from .grid_stride import _paren, element_guard
from .opening import element_hazard
from .rowpar import rows_expression
from .syntax import Node

VEC_BYTES = 16
# element type -> (size in bytes, bits -> element, element -> bits (an unsigned value))
ELEMENTS = {
    "float": (4, "__uint_as_float({})", "__float_as_uint((float)({}))"),
    "__half": (2, "__ushort_as_half((unsigned short)({}))", "(unsigned)__half_as_ushort((__half)({}))"),
    "half": (2, "__ushort_as_half((unsigned short)({}))", "(unsigned)__half_as_ushort((__half)({}))"),
    "__nv_bfloat16": (2, "__ushort_as_bfloat16((unsigned short)({}))", "(unsigned)__bfloat16_as_ushort((__nv_bfloat16)({}))"),
    "nv_bfloat16": (2, "__ushort_as_bfloat16((unsigned short)({}))", "(unsigned)__bfloat16_as_ushort((__nv_bfloat16)({}))"),
}
LOADS = {"__ldg": "__ldg", "__ldcs": "__ldcs"}  # scalar hint -> the same on the 16-byte load (uint4 overloads)
STORES = {"__stcs": "__stcs"}
NA_V4 = "ptxf_ldna_v4u32"
COMPONENTS = "xyzw"
WIDTHS = {16: "uint4", 8: "uint2"}  # bytes a thread moves per buffer -> the vector type
FORBIDDEN = ("if_statement", "switch_statement", "break_statement", "continue_statement") + sx.LOOPS


def na_v4_helper() -> tuple[str, str]:
    """``(name, definition)`` of the 16-byte ``ld.global.nc.L1::no_allocate`` load (what ``ldg_na`` uses per element)."""
    body = (
        f"static __device__ __forceinline__ uint4 {NA_V4}(const void* p)\n"
        "{  // ld.global.nc.L1::no_allocate, 16 bytes: read-only path, no L1 allocation (data read once)\n"
        "    uint4 v;\n"
        '    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"\n'
        '        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));\n'
        "    return v;\n"
        "}"
    )
    return NA_V4, body


def vector_load(hint: str | None, vt: str, addr: str, helpers: list) -> str:
    """The C expression loading one ``vt`` (``uint4``, ``uint2``) from the element address ``addr`` with the scalar
    loads' ``hint`` kept: a plain load, ``__ldg``/``__ldcs`` of the vector, or the 16-byte ``ld.global.nc.L1::
    no_allocate`` helper (appended to ``helpers``) for ``ldg_na``'s."""
    ptr = f"reinterpret_cast<const {vt}*>({addr})"
    if hint is None:
        return f"*{ptr}"
    if hint.startswith("ptxf_ldna_"):
        helpers.append(na_v4_helper())
        return f"{NA_V4}({addr})"
    return f"{LOADS.get(hint, hint)}({ptr})"


class VectorizePass:
    """One thread per element -> one thread per 16 bytes: 16-byte loads and stores, scalar tail, grid / VEC."""

    name = "vectorize"
    group = "grid"  # changes the grid's meaning, as grid_stride does: never chained with it
    exact = True
    restructures = False  # it says why_not for the report; the plan's order stays as for the hints

    def _match(self, unit: Unit) -> tuple[dict | None, str | None]:
        """``(match, None)`` when the pass applies to ``unit`` (its compound stores already plain: :func:`plain_stores`),
        else ``(None, reason)``."""
        if unit.body is None:
            return None, "no kernel body to read (the text does not parse as a kernel, or a macro could not be expanded)"
        if unit.spec.launch.policy != "free":
            return None, f'the launch policy is "{unit.spec.launch.policy}", not "free": the grid may not change'
        if len(unit.launch.grid) != 1 or not unit.block_is_1d():
            return None, f"the launch {list(unit.launch.grid)} x {list(unit.launch.block)} is not 1-D"
        why: list[str] = []
        g = element_guard(unit, tolerant=True, why=why)  # (uniform declarations may precede the index: int total = N * C;)
        if g is not None and (g.extra or g.batch):
            return None, "the guard has parts besides the index's bound, or the grid a batch axis"
        if g is None:
            return None, ("no one-thread-per-element opening (T i = blockIdx.x * blockDim.x + threadIdx.x; if (i >= n) "
                          f"return; ...){f' ({why[0]})' if why else ''}")
        block = unit.block_threads()
        symbol = _cdiv_extent(unit.launch.grid[0], block)
        if symbol is None:
            return None, f"the grid {unit.launch.grid[0]!r} is not cdiv(N, {block or 'B'}) over the block's threads"
        if not self._bound_is(unit, g.bound, symbol):
            return None, (f"the guard's bound {sx.text(g.bound)!r} is not an expression of scalar parameters whose spec "
                          f"values give {symbol} at every size")
        name, type_node, init, bound, rest = g.name, g.type_node, g.init, g.bound, g.rest
        for stmt in rest:
            reason = element_hazard(stmt, name, sx.identifiers(bound)) or _branch(stmt)
            if reason is not None:
                return None, f"line {stmt.start_point[0] + 1}: {reason}"
        ctype = sx.type_text(type_node)
        if ctype not in sx.INT_TYPES or ctype.startswith(("short", "unsigned short", "char", "signed char", "unsigned char", "int8", "uint8")):
            return None, f"the index's type {ctype!r} is not an integer type of 32 bits or more"
        bufs, reason = self._buffers(unit, name, rest)
        if bufs is None:
            return None, reason
        sizes = {ELEMENTS[p.base][0] for p, _ in bufs.values()}
        vec = VEC_BYTES // max(sizes)
        for p, acc in bufs.values():  # a narrower buffer moves vec * size bytes: 8 (uint2) at least, no no-allocate hint
            width = vec * ELEMENTS[p.base][0]
            if width not in WIDTHS:
                return None, f"{p.name} would move {width} bytes a thread beside {VEC_BYTES}-byte buffers (8 at least)"
            if width != VEC_BYTES and any(a[0] == "read" and (a[2] or "").startswith("ptxf_ldna_") for a in acc):
                return None, f"{p.name} moves {width} bytes a thread and is read through ldg_na, which has no such load"
        reason = self._sizes_refusal(unit, symbol, ctype, block, vec, [p.name for p, _ in bufs.values()])
        if reason is not None:
            return None, reason
        return {"name": name, "type": ctype, "init": init, "bound": bound, "rest": rest, "bufs": bufs, "vec": vec,
                "symbol": symbol, "block": block, "start": g.start, "end": g.end}, None

    def _bound_is(self, unit: Unit, bound: Node, extent: str) -> bool:
        """``bound`` is scalar parameters (``n``, ``batch * dim``; casts allowed), or a local declared once from them and
        never written (``int total = N * C;``), whose spec values give the grid's ``extent`` at every check and bench
        size."""
        b = sx.uncast(bound)
        if sx.is_ident(b) and sx.declaration_counts(unit.fn).get(sx.text(b)) == 1 \
                and sx.text(b) not in sx.maybe_written_names(unit.body):
            init = next((d.child_by_field_name("value") for d in sx.walk(unit.body) if d.type == "init_declarator"
                         and sx.is_ident(d.child_by_field_name("declarator"), sx.text(b))), None)
            if init is not None:
                b = sx.uncast(init)
        if sx.is_ident(b):
            arg = next((a for a in unit.spec.args if a.name == sx.text(b) and a.role == "scalar"), None)
            if arg is not None and str(arg.value).strip() == extent:
                return True
        expr = rows_expression(unit, b)
        if expr is None:
            return False
        try:
            return all(int(evaluate(expr, size)) == int(evaluate(extent, size))
                       for size in unit.spec.check.sizes + unit.spec.bench.sizes)
        except (ExprError, ValueError, TypeError):
            return False

    def _buffers(self, unit: Unit, index: str, rest: list[Node]) -> tuple[dict[str, tuple[PointerParam, list]] | None, str | None]:
        """Buffers used in ``rest`` -> (param, accesses): ``("read", node, hint)`` / ``("write", stmt, lhs, value, hint)``,
        and None; or None and why a use is not of the pattern."""
        lo, hi = rest[0].start_byte, rest[-1].end_byte
        top = {s.start_byte: s for s in rest}
        out: dict[str, tuple[PointerParam, list]] = {}
        at = "at the thread's index (vectorize_x may take it)"
        for p in unit.pointers.values():
            uses = p.reads + p.loads + p.writes + p.other
            if not uses:
                continue
            if p.other:
                return None, f"{p.name} is {other_use(p.other[0])}"
            if p.base not in ELEMENTS:
                return None, f"{p.name}'s element type {p.base} is not float, __half or __nv_bfloat16"
            outside = next((u for u in uses if not lo <= u.start_byte < hi), None)
            if outside is not None:
                return None, f"{p.name} is used outside the element's code ({use_site(outside)})"
            accesses = []
            for r in p.reads:
                if not _subscript_at(r, p.name, index):
                    return None, f"{_shown(r)} is not {p.name}[{index}] {at}"
                accesses.append(("read", r, None))
            for call in p.loads:
                fn = sx.call_name(call)
                args = sx.call_args(call)
                if not (fn in LOADS or fn.startswith("ptxf_ldna_")) or len(args) != 1:
                    return None, f"{use_site(call)}: a load the pass does not widen"
                if not _offset_at(args[0], p.name, index):
                    return None, f"{_shown(call)} does not read {p.name} + {index} {at}"
                accesses.append(("read", call, fn))
            writes = []
            for w in p.writes:
                stmt = w.parent.parent if w.type == "subscript_expression" else w.parent
                if stmt is None or stmt.type != "expression_statement" or top.get(stmt.start_byte) != stmt:
                    return None, f"{use_site(w)}: a store that is not a statement of the element's code of its own"
                if w.type == "subscript_expression":
                    assign = w.parent
                    if assign.type != "assignment_expression" or sx.operator(assign) != "=":
                        return None, f"{use_site(stmt)}: not a plain store {p.name}[{index}] = v;"
                    if not _subscript_at(w, p.name, index):
                        return None, f"{_shown(w)} is not {p.name}[{index}] {at}"
                    writes.append(("write", stmt, assign, assign.child_by_field_name("right"), None))
                else:
                    args = sx.call_args(w)
                    if sx.call_name(w) not in STORES or len(args) != 2:
                        return None, f"{use_site(w)}: a store the pass does not widen"
                    if not _offset_at(args[0], p.name, index):
                        return None, f"{_shown(w)} does not store to {p.name} + {index} {at}"
                    writes.append(("write", stmt, w, args[1], sx.call_name(w)))
            if len(writes) > 1:
                return None, f"{p.name} is stored twice in the element's code ({use_site(writes[1][1])})"
            late = next((a for a in accesses if writes and a[1].start_byte >= writes[0][1].end_byte), None)
            if late is not None:
                return None, f"{p.name} is read after its store ({use_site(late[1])})"
            out[p.name] = (p, accesses + writes)
        return (out, None) if out else (None, "the element's code touches no buffer")

    def _sizes_refusal(self, unit: Unit, symbol: str, ctype: str, block: int, vec: int, buffers: list[str]) -> str | None:
        """Why a buffer may hold fewer than N elements, or (32-bit index) ``N + B * VEC`` come near 2^31, at a spec size;
        None when neither can."""
        spec = unit.spec
        args = {a.name: a for a in spec.args}
        missing = next((b for b in buffers if b not in args or not args[b].is_buffer), None)
        if missing is not None:
            return f"{missing} is not a buffer of the spec"
        limit = 2**31 - 1 - 2 * block * vec if ctype not in sx.WIDE_INT_TYPES else None
        for size in spec.check.sizes + spec.bench.sizes:
            try:
                n = int(evaluate(symbol, size))
                short = next((b for b in buffers if args[b].numel(size) < n), None)
            except (ExprError, KeyError):
                return f"{symbol} or a buffer's shape cannot be evaluated at the size {dict(size)}"
            if short is not None:
                return f"{short} holds fewer than {symbol} elements at the size {dict(size)}"
            if limit is not None and n > limit:
                return f"a 32-bit index ({ctype}) could overflow at the size {dict(size)}"
        return None

    def why_not(self, unit: Unit) -> str | None:
        """Why the pass refuses ``unit`` (None when it applies)."""
        return self._match(plain_stores(unit))[1]

    def applies(self, unit: Unit) -> bool:
        return self.why_not(unit) is None

    def apply(self, unit: Unit) -> Unit:
        unit = plain_stores(unit)
        m = self._match(unit)[0]
        data, t, vec, name = unit.data, m["type"], m["vec"], m["name"]
        indent = sx.line_indent(data, m["start"])[0].decode()
        i1, i2 = indent + "    ", indent + "        "
        bound = _paren(m["bound"])
        bufs = m["bufs"]
        base = "ptxf_v0" if "v0" not in bufs else "ptxf_vbase"  # (ptxf_<buffer> names each 16-byte load)
        uses_index = _index_used_as_value(m["rest"], name, bufs)
        helpers = []

        # the 16-byte loads, one per buffer read
        lines = []
        reads = {}  # (start, end) of a read access -> buffer name
        for b, (p, acc) in bufs.items():
            rd = [a for a in acc if a[0] == "read"]
            if not rd:
                continue
            for a in rd:
                reads[(a[1].start_byte, a[1].end_byte)] = b
            hint = rd[0][2]
            vt = WIDTHS[vec * ELEMENTS[p.base][0]]
            lines.append(f"{i1}const {vt} ptxf_{b} = {vector_load(hint, vt, f'{b} + {base}', helpers)};")
        stores = {b: next(a for a in acc if a[0] == "write") for b, (p, acc) in bufs.items() if any(a[0] == "write" for a in acc)}
        if stores:
            lines.append(f"{i1}unsigned " + ", ".join(f"ptxf_{b}_{k}" for b in stores for k in range(vec)) + ";")

        # the rest, once per element
        for k in range(vec):
            def element(node: Node, k=k) -> bytes | None:
                b = reads.get((node.start_byte, node.end_byte))
                if b is not None:
                    return _unpack(bufs[b][0].base, b, k).encode()
                for sb, w in stores.items():
                    if (node.start_byte, node.end_byte) == (w[2].start_byte, w[2].end_byte):
                        value = sx.render(w[3], data, element).decode()
                        return f"ptxf_{sb}_{k} = {ELEMENTS[bufs[sb][0].base][2].format(value)}".encode()
                return None

            body = [sx.render(s, data, element).decode() for s in m["rest"]]
            head = [f"const {t} {name} = {base} + {k};"] if uses_index else []
            text = "\n".join(head + body).replace("\n", "\n" + i1 + "    ")
            lines.append(f"{i1}{{  // element {k}\n{i1}    {text}\n{i1}}}")

        for b, w in stores.items():
            size = ELEMENTS[bufs[b][0].base][0]
            words = [f"ptxf_{b}_{k}" for k in range(vec)] if size == 4 else [
                f"ptxf_{b}_{2 * j} | (ptxf_{b}_{2 * j + 1} << 16)" for j in range(vec // 2)]
            vt = WIDTHS[vec * size]
            value = f"make_{vt}(" + ", ".join(words) + ")"
            ptr = f"reinterpret_cast<{vt}*>({b} + {base})"
            lines.append(f"{i1}{STORES[w[4]]}({ptr}, {value});" if w[4] else f"{i1}*{ptr} = {value};")

        by_width: dict[int, list[str]] = {}
        for b, (p, _) in bufs.items():
            by_width.setdefault(vec * ELEMENTS[p.base][0], []).append(b)
        aligned = " && ".join(
            "((" + " | ".join(f"reinterpret_cast<unsigned long long>({b})" for b in names) + f") & {w - 1}ull) == 0ull"
            for w, names in sorted(by_width.items(), reverse=True))
        scalar = "\n".join(sx.text(s) for s in m["rest"]).replace("\n", "\n" + i2)
        out = (
            f"const {t} {base} = ({t})({sx.text(m['init'])}) * {vec};  // first of this thread's {vec} elements (transform vectorize)\n"
            f"{indent}if ({base} >= {bound}) return;\n"
            f"{indent}if ({base} + {vec} <= {bound} && {aligned}) {{  // 16-byte loads and stores{' (8 for 2-byte elements)' if len(by_width) > 1 else ''}\n"
            + "\n".join(lines) + "\n"
            f"{indent}}} else {{  // the tail, or buffers not 16-byte aligned: element by element\n"
            f"{i1}for ({t} {name} = {base}; {name} < {base} + {vec} && {name} < {bound}; ++{name}) {{\n"
            f"{i2}{scalar}\n"
            f"{i1}}}\n"
            f"{indent}}}"
        )
        edits = [(m["start"], m["end"], out.encode())]
        grid = f"cdiv({m['symbol']}, {m['block'] * vec})"
        launch = LaunchConfig(grid=[grid], block=list(unit.launch.block), shared_mem=unit.launch.shared_mem)
        return unit.with_text(sx.apply_edits(data, edits), launch=launch, helpers=helpers, vec=VEC_BYTES)


def _cdiv_extent(grid, block: int | None) -> str | None:
    """``N`` (an expression of the spec's sizes: ``n``, ``(batch * dim)``) of a grid ``cdiv(N, B)``, ``B`` the block's
    thread count; None for another grid."""
    if block is None or not isinstance(grid, str):
        return None
    try:
        e = ast.parse(grid.strip(), mode="eval").body
    except SyntaxError:
        return None
    if not (isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "cdiv" and len(e.args) == 2 and not e.keywords):
        return None
    n, b = e.args
    if not (isinstance(b, ast.Constant) and b.value == block):
        return None
    return n.id if isinstance(n, ast.Name) else f"({ast.unparse(n)})"


def _shown(node: Node) -> str:
    """``node``'s text on one line."""
    return " ".join(sx.text(node).split())


def _branch(stmt: Node) -> str | None:
    """Why ``stmt`` is not straight-line code (a branch, a loop, a jump in it), None when it is."""
    n = next((n for n in sx.walk(stmt) if n.type in FORBIDDEN), None)
    if n is None:
        return None
    kind = ("a branch" if n.type in ("if_statement", "switch_statement") else "a loop" if n.type in sx.LOOPS
            else f"a {n.type.removesuffix('_statement')}")
    shown = _shown(n)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return f"{kind} in the element's code ({shown!r}): each of the thread's elements must run the same statements"


def _subscript_at(node: Node, pointer: str, index: str) -> bool:
    """``node`` is ``pointer[index]``."""
    if node.type != "subscript_expression" or not sx.is_ident(node.child_by_field_name("argument"), pointer):
        return False
    idx = [c for c in node.child_by_field_name("indices").named_children if c.type != "comment"]
    return len(idx) == 1 and sx.is_ident(sx.unparen(idx[0]), index)


def _offset_at(node: Node, pointer: str, index: str) -> bool:
    """``node`` is ``pointer + index`` (parentheses allowed)."""
    node = sx.unparen(node)
    return (
        node is not None and node.type == "binary_expression" and sx.operator(node) == "+"
        and sx.is_ident(sx.unparen(node.child_by_field_name("left")), pointer)
        and sx.is_ident(sx.unparen(node.child_by_field_name("right")), index)
    )


def _index_used_as_value(rest: list[Node], index: str, bufs: dict) -> bool:
    """``index`` appears in ``rest`` other than as the offset of a matched access."""
    spans = []
    for _, acc in bufs.values():
        for a in acc:
            target = a[1] if a[0] == "read" else _store_target(a[2])
            spans.append((target.start_byte, target.end_byte))
    for stmt in rest:
        for n in sx.walk(stmt):
            if sx.is_ident(n, index) and not any(s <= n.start_byte < e for s, e in spans):
                return True
    return False


def _store_target(store: Node) -> Node:
    """``q[i]`` of ``q[i] = v``, ``q + i`` of ``__stcs(q + i, v)``."""
    return store.child_by_field_name("left") if store.type == "assignment_expression" else sx.call_args(store)[0]


def _unpack(base: str, buf: str, k: int) -> str:
    """Element ``k`` of the vector value ``ptxf_<buf>`` (``uint4`` or ``uint2``), as an element-type expression."""
    size, to_elem, _ = ELEMENTS[base]
    if size == 4:
        return to_elem.format(f"ptxf_{buf}.{COMPONENTS[k]}")
    word = f"ptxf_{buf}.{COMPONENTS[k // 2]}"
    return to_elem.format(word + (" >> 16" if k % 2 else " & 0xffffu"))


_COMPOUND = ("+=", "-=", "*=", "/=")
_HALF_TYPES = ("__half", "half", "__nv_bfloat16", "nv_bfloat16")  # 16-bit floats whose compound assignments take their own type


def plain_stores(unit: Unit) -> Unit:
    """``unit`` with each statement ``p[E] op= v;`` (``op`` one of ``+ - * /``; ``p`` a pointer parameter; ``E`` free
    of calls, assignments and increments) written ``p[E] = p[E] op (v);``: the same operations on the same values (the
    left side is evaluated once either way, having no side effect), in the one form of store the pass reads
    (an Adam step's ``p[i] -= lr * ...``); for a 16-bit float ``p`` the value is converted to its type first, as the
    compound operator does (``__half``'s ``operator+=`` takes a ``__half``). ``unit`` itself when there is none."""
    if unit.body is None:
        return unit
    edits = []
    for stmt in sx.walk(unit.body):
        if stmt.type != "expression_statement" or not stmt.named_children:
            continue
        a = sx.unparen(stmt.named_children[0])
        if a.type != "assignment_expression" or sx.operator(a) not in _COMPOUND:
            continue
        left, right = sx.unparen(a.child_by_field_name("left")), a.child_by_field_name("right")
        if left.type != "subscript_expression" or sx.text(left.child_by_field_name("argument")) not in unit.pointers:
            continue
        index = sx.subscript_index(left)
        if index is None or sx.contains_type(index, ("call_expression", "assignment_expression", "update_expression")):
            continue
        target = sx.text(left)
        value = sx.text(right)
        base = unit.pointers[sx.text(left.child_by_field_name("argument"))].base
        if base in _HALF_TYPES:  # __half's operator+= takes a __half: the value converts first (a float + __half is ambiguous)
            value = f"({base})({value})"
        edits.append((a.start_byte, a.end_byte, f"{target} = {target} {sx.operator(a)[0]} ({value})".encode()))
    return unit.with_text(sx.apply_edits(unit.data, edits)) if edits else unit
