"""``vectorize_x``: each thread takes VEC consecutive x coordinates; accesses at ``base + x`` move 16 bytes at a time.

Pattern (1-D, 2-D or 3-D launch; the x index declared at the body's top level, the rest straight-line code)::

    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int m = blockIdx.y * blockDim.y + threadIdx.y;        // anything that does not read j's builtins again
    if (j >= H || m >= M) return;                          // exit guards; or a last if (j < H && m < M) { ... }
    float g = xin[(size_t)m * 2 * H + j];                  // base + j: one 16-byte vector for VEC elements
    float u = xin[(size_t)m * 2 * H + H + j];
    out[m * H + j] = g / (1.0f + expf(-g)) * u;            // one 16-byte store

becomes (``VEC = 16 / sizeof(E)`` for the widest element E of the vectorised buffers, float or 16-bit; a 16-bit
buffer beside float ones moves 8 bytes)::

    const int ptxf_x0 = (int)(blockIdx.x * blockDim.x + threadIdx.x) * VEC;
    if (<every guard passes for x = ptxf_x0 + VEC - 1> && <each vector's address 16-byte aligned>) {
        const uint4 ptxf_vx0 = *reinterpret_cast<const uint4*>(xin + (<base at x = ptxf_x0>)); ...
        { const int j = ptxf_x0 + 0; <the rest, guards dropped, vector accesses as elements> } ... x VEC
        *reinterpret_cast<uint4*>(out + (<base at ptxf_x0>)) = make_uint4(...);
    } else {   // edges, misalignment: each element's exit guards end that element (continue)
        for (int j = ptxf_x0; j < ptxf_x0 + VEC && j < G * blockDim.x; ++j) { <the statements as written> }
    }

and the grid's x extent ``G`` becomes ``cdiv(G, VEC)``. In a guard, each part that reads x is an upper bound (``j >=
B`` before a return, ``j < B`` around the rest) and every other part is the same for the thread's VEC elements, so
the guards pass for all VEC elements when they pass for the last one; both paths also stop at the x the original
grid covered (``G * blockDim.x``, ``G`` in the kernel's scalars), which a kernel without a guard on x relies on. An access is vectorised where its index, the locals it reads inlined, is ``base + x``
(``base`` free of x), it is not under a conditional (``c ? p[e] : 0`` loads only when ``c``), and its buffer is float,
``__half`` or ``__nv_bfloat16``; so are the accesses ``c * x + base + o`` of a stride ``c`` of 2 or 4 where every
offset ``o`` in ``0..c-1`` is read (RoPE's pair ``x[base + 2i]``, ``x[base + 2i + 1]``): the span of ``c * VEC``
elements, ``c`` vectors, element k's offset o its element ``c * k + o``. A written buffer is vectorised only where all
its accesses are one such group, each offset stored once and none read after its offset's store (an update in place),
the stores deferred to after the VEC elements. A read the elements share (an index free of x into a buffer the kernel
never writes, not under a condition: a channel's scale) is loaded once before them. Every other access (``b[j % C]``,
a gather) stays a scalar access of each element. Exact: each element runs the
same statements on the same values.

Refused, with the reason (:meth:`VectorizeXPass.why_not`): a launch policy other than ``"free"``; no top-level x
index; x's builtins read again; a parameter or a name declared before the index written by the elements' code (a
pointer bumped to its row); a name declared twice (locals are read by name); a grid x extent with no C form; a loop, ``if`` (other than the guards), ``switch``, ``goto``, barrier, collective,
``__shared__`` or other ``return``; a guard part on x that is not an upper bound, or one reading a local derived from
x; a guard after a vectorised store; no access at ``base + x``; a kernel that plain ``vectorize`` takes (``p[i]``
everywhere: its candidate).
"""
from __future__ import annotations

from ptxfactory.protocol import LaunchConfig
from ptxfactory.protocol.expr import ExprError, to_c

from . import affine
from . import syntax as sx
from .base import Unit
from ...base import size_names
from .coarsen_outer import _outer_decl, guard_refusal, repeat_hazard, repeated_index_refusal
from .opening import BUILTINS
from .syntax import Node
from .vectorize import ELEMENTS, LOADS, STORES, VEC_BYTES, WIDTHS, VectorizePass, _unpack, plain_stores, vector_load

_BRANCHES = ("if_statement", "switch_statement", "break_statement", "continue_statement", "return_statement",
             "goto_statement", "labeled_statement") + sx.LOOPS


class VectorizeXPass:
    """VEC consecutive x coordinates a thread; unit-stride accesses along x as 16-byte vectors, the grid's x / VEC."""

    name = "vectorize_x"
    unique_names = True  # reads locals by name: given the unit with each local declared once (unique_names.py)
    group = "vecx"  # optional and unproven (see the generator's groups): it chains after unflatten's 2-D/3-D launch
    exact = True

    # -- precondition -------------------------------------------------------------------------------------------

    def _match(self, unit: Unit) -> tuple[dict | None, str | None]:
        if unit.body is None:
            return None, "no kernel body to read (the text does not parse as a kernel, or a macro could not be expanded)"
        if unit.spec.launch.policy != "free":
            return None, f'the launch policy is "{unit.spec.launch.policy}", not "free": the grid may not change'
        stmts = sx.statements(unit.body)
        at = next((i for i, s in enumerate(stmts) if _outer_decl(s, "x") is not None), None)
        if at is None:
            return None, "no top-level declaration of the x index (T j = blockIdx.x * blockDim.x + threadIdx.x;)"
        j, type_node, _ = _outer_decl(stmts[at], "x")
        ctype = sx.type_text(type_node)
        if ctype not in sx.INT_TYPES or ctype in ("short", "unsigned short", "char", "signed char", "unsigned char", "int8_t", "uint8_t"):
            return None, f"the x index's type {ctype!r} is not an integer type of 32 bits or more"
        why = repeated_index_refusal(unit, stmts, at, "x", "x index", "element")
        if why:
            return None, why
        rest = stmts[at + 1:]
        twice = sorted(n for n, c in sx.declaration_counts(unit.fn).items() if c > 1)
        if twice:
            return None, f"{', '.join(twice)} declared more than once (the pass reads locals by name)"
        names = size_names(unit.spec)
        grid0 = str(unit.launch.grid[0]).strip()
        try:
            extent = to_c(grid0, names)
        except ExprError as exc:
            return None, f"the grid's x extent {grid0!r} has no C form in the kernel's scalars ({exc})"
        last = rest[-1] if rest else None  # the locals of a last `if (guard) { ... }` too (int idx = row * cols + col;)
        kept = []
        if last is not None and last.type == "if_statement" and last.child_by_field_name("alternative") is None:
            cons = last.child_by_field_name("consequence")
            kept = sx.statements(cons) if cons.type == "compound_statement" else []
        locals_ = _inlinable(unit, stmts + kept, j)
        dependent = _dependent(j, locals_)
        # the statements in order, guards marked: exit guards anywhere at the top level, a keep guard last
        flat: list[tuple[str, Node]] = []
        for k, s in enumerate(rest):
            if s.type == "if_statement" and s.child_by_field_name("alternative") is None:
                cons = s.child_by_field_name("consequence")
                body = sx.statements(cons) if cons.type == "compound_statement" else [cons]
                if len(body) == 1 and body[0].type == "return_statement" and body[0].named_child_count == 0:
                    flat.append(("exit", s))
                    continue
                if k == len(rest) - 1:
                    flat.append(("keep", s))
                    flat += [("stmt", b) for b in body]
                    continue
            flat.append(("stmt", s))
        for kind, s in flat:
            if kind != "stmt":
                continue
            if sx.contains_type(s, _BRANCHES):
                return None, f"line {s.start_point[0] + 1}: a branch, loop or return in the elements' code (straight-line code only)"
            why = repeat_hazard(s, lambda loop: False)
            if why:
                return None, f"line {s.start_point[0] + 1}: {why} in the elements' code"
        guards = []
        for kind, s in flat:
            if kind == "stmt":
                continue
            cond = sx.unparen(s.child_by_field_name("condition").child_by_field_name("value"))
            why = guard_refusal(cond, j, dependent, kind, "x index") or _unknown_names(cond, unit, locals_, j)
            if why:
                return None, f"line {s.start_point[0] + 1}: {why}"
            guards.append((kind, s, cond))
        return {"at": at, "j": j, "type": ctype, "flat": flat, "guards": guards, "locals": locals_, "extent": extent,
                "dependent": dependent, "stmts": stmts}, None

    def _plan(self, unit: Unit) -> tuple[dict | None, str | None]:
        """The match on ``plain_stores(unit)`` with its vectors: ``(plan, None)`` or ``(None, reason)``."""
        unit = plain_stores(unit)
        m, why = self._match(unit)
        if m is None:
            return None, why
        if VectorizePass().applies(unit):
            return None, "vectorize takes it (every access p[i] of a 1-D elementwise kernel)"
        j, flat = m["j"], m["flat"]
        offsets = {n: p for n, (_, p) in m["locals"].items() if p is not None}
        stored_after = False
        accesses: dict[str, list] = {}
        for kind, s in flat:
            if kind == "exit" and stored_after:
                return None, f"line {s.start_point[0] + 1}: a guard after a store (the vector path stores last)"
            if kind != "stmt":
                continue
            for n in sx.walk(s):
                acc = _access(unit, n)
                if acc is None or _unevaluated(n, s):
                    continue
                buf, index, mode, hint, node = acc
                accesses.setdefault(buf, []).append((mode, index, hint, node, s, _conditional(n, s)))
                if mode == "write":
                    stored_after = True
        vectors: dict[tuple, dict] = {}  # (buffer, stride, base) -> its c consecutive vectors
        for buf, accs in accesses.items():
            p = unit.pointers.get(buf)
            if p is None or p.base not in ELEMENTS or not _understood(p, accs):
                continue
            forms = []  # per access: (stride c, base key, offset o) of an index c * x + base + o, or None
            for mode, index, hint, node, stmt, cond in accs:
                form = _stride_form(index, j, offsets, m["dependent"])
                plain = mode == "read" or (stmt.type == "expression_statement" and node.parent == stmt)
                known = form is not None and _unknown_names(index, unit, m["locals"], j) is None
                forms.append(form if known and plain and not cond else None)
            groups: dict[tuple, set[int]] = {}
            for f in forms:
                if f is not None:
                    groups.setdefault(f[:2], set()).add(f[2])
            complete = {g for g, offs in groups.items() if offs == set(range(g[0]))}  # (the span the original reads)
            writes = [a for a in accs if a[0] == "write"]
            if writes:  # a written buffer: one complete group, each offset stored once, no read after its offset's store
                stored = [(f[2], a[4]) for f, a in zip(forms, accs) if a[0] == "write" and f is not None]
                offs = [o for o, _ in stored]
                if None in forms or len(groups) != 1 or not complete or sorted(offs) != list(range(next(iter(groups))[0])):
                    continue  # (every offset of the span stored once: the vector store writes all of them)
                if any(a[0] == "read" and f[2] == o and st.end_byte <= a[3].start_byte
                       for f, a in zip(forms, accs) for o, st in stored):
                    continue  # a read after its offset's store sees the new value, not the vector loaded before
            for (mode, index, hint, node, stmt, cond), f in zip(accs, forms):
                if f is None or f[:2] not in complete:
                    continue
                v = vectors.setdefault((buf, *f[:2]), {"buf": buf, "elem": p.base, "c": f[0], "reads": [], "writes": {},
                                                        "hint": None, "base0": None})
                if f[2] == 0:
                    v["base0"] = _render(index, unit.data, j, "ptxf_x0", m["locals"])
                if mode == "read":
                    v["reads"].append((node, f[2]))
                    v["hint"] = v["hint"] or hint
                else:
                    v["writes"][f[2]] = (node, hint)
        vectors = {k: v for k, v in vectors.items() if v["base0"] is not None}
        if not vectors:
            return None, "no access p[base + x] (the locals it reads inlined, base free of x) of a float or 16-bit buffer"
        vec = VEC_BYTES // max(ELEMENTS[v["elem"]][0] for v in vectors.values())
        for v in vectors.values():
            width = vec * ELEMENTS[v["elem"]][0]
            if width not in WIDTHS or (width != VEC_BYTES and (v["hint"] or "").startswith("ptxf_ldna_")):
                return None, f"{v['buf']}: {width} bytes a thread cannot take its no-allocate hint"
            if len({h for _, h in v["writes"].values()}) > 1:
                return None, f"{v['buf']}: its stores take different hints"
        # reads the VEC elements share (a channel's scale: an index free of x, a buffer the kernel never writes, not
        # under a condition), loaded once before the elements
        uniform: dict[str, list[Node]] = {}
        for buf, accs in accesses.items():
            p = unit.pointers.get(buf)
            if p is None or not p.read_only or not _understood(p, accs):
                continue
            for mode, index, hint, node, stmt, cond in accs:
                if mode == "read" and not cond and not (sx.identifiers(index) & (m["dependent"] | {j})) \
                        and _unknown_names(index, unit, m["locals"], j) is None:
                    uniform.setdefault(_render(node, unit.data, j, "ptxf_x0", m["locals"]), []).append(node)
        m.update(vectors=vectors, vec=vec, unit=unit, uniform=uniform)
        return m, None

    def why_not(self, unit: Unit) -> str | None:
        """Why the pass refuses ``unit`` (None when it applies)."""
        return self._plan(unit)[1]

    def applies(self, unit: Unit) -> bool:
        return self.why_not(unit) is None

    # -- rewrite --------------------------------------------------------------------------------------------------

    def apply(self, unit: Unit) -> Unit:
        m, reason = self._plan(unit)
        if m is None:
            raise ValueError(f"{self.name} does not apply: {reason}")
        unit = m["unit"]
        data, j, t, vec, stmts, at = unit.data, m["j"], m["type"], m["vec"], m["stmts"], m["at"]
        ind = sx.line_indent(data, stmts[at].start_byte)[0].decode()
        i1, i2 = ind + "    ", ind + "        "
        vectors = list(m["vectors"].values())
        helpers = []
        # the condition: every guard passes for the thread's last element, every vector aligned
        conds = [f"(long long)ptxf_x0 + {vec} <= ptxf_xn"]
        last = f"(ptxf_x0 + {vec - 1})"
        for kind, _, cond in m["guards"]:
            c = _render(cond, data, j, last, m["locals"])
            conds.append(f"!({c})" if kind == "exit" else f"({c})")
        by_width: dict[int, list[str]] = {}
        for v in vectors:
            by_width.setdefault(vec * ELEMENTS[v["elem"]][0], []).append(f"reinterpret_cast<unsigned long long>({v['buf']} + ({v['base0']}))")
        conds += [f"((({' | '.join(addrs)}) & {w - 1}ull) == 0ull)" for w, addrs in sorted(by_width.items(), reverse=True)]
        # the loads, the elements, the stores: a group of stride c moves c vectors, element k's offset o is the
        # span's element c * k + o (vector (c * k + o) // VEC, component (c * k + o) % VEC)
        lines, reads, stores = [], {}, {}
        for n, v in enumerate(vectors):
            vt = WIDTHS[vec * ELEMENTS[v["elem"]][0]]
            v["name"] = f"vx{n}"
            for r, o in v["reads"]:
                reads[(r.start_byte, r.end_byte)] = (v, o)
            for o, (w, _) in v["writes"].items():
                stores[(w.start_byte, w.end_byte)] = (v, o)
            if not v["reads"]:
                continue
            for q in range(v["c"]):
                addr = f"{v['buf']} + ({v['base0']})" + (f" + {q * vec}" if q else "")
                lines.append(f"{i1}const {vt} ptxf_{v['name']}_{q} = {vector_load(v['hint'], vt, addr, helpers)};")
        for v in vectors:
            if v["writes"]:
                lines.append(f"{i1}unsigned " + ", ".join(f"ptxf_{v['name']}_s{e}" for e in range(v["c"] * vec)) + ";")
        shared = {}
        for n, (text, nodes) in enumerate(m["uniform"].items()):
            first = nodes[0]
            ptr = (first.child_by_field_name("argument") if first.type == "subscript_expression"
                   else sx.unparen(sx.unparen(sx.call_args(first)[0]).child_by_field_name("left")))
            elem = unit.pointers[sx.text(ptr)].base
            lines.append(f"{i1}const {elem} ptxf_u{n} = {text};  // the same for the {vec} elements")
            shared.update({(x.start_byte, x.end_byte): f"ptxf_u{n}" for x in nodes})
        body_stmts = [s for kind, s in m["flat"] if kind == "stmt"]
        for k in range(vec):
            def element(node: Node, k=k) -> bytes | None:
                name = shared.get((node.start_byte, node.end_byte))
                if name is not None:
                    return name.encode()
                hit = reads.get((node.start_byte, node.end_byte))
                if hit is not None:
                    v, o = hit
                    e = v["c"] * k + o
                    return _unpack(v["elem"], f"{v['name']}_{e // vec}", e % vec).encode()
                hit = stores.get((node.start_byte, node.end_byte))
                if hit is not None:
                    v, o = hit
                    value = node.child_by_field_name("right") if node.type == "assignment_expression" else sx.call_args(node)[1]
                    text = sx.render(value, data, element).decode()
                    return f"ptxf_{v['name']}_s{v['c'] * k + o} = {ELEMENTS[v['elem']][2].format(text)}".encode()
                return None

            body = [f"const {t} {j} = ptxf_x0 + {k};"] + [sx.render(s, data, element).decode() for s in body_stmts]
            text = "\n".join(body).replace("\n", "\n" + i1 + "    ")
            lines.append(f"{i1}{{  // element {k}\n{i1}    {text}\n{i1}}}")
        for v in vectors:
            if not v["writes"]:
                continue
            size = ELEMENTS[v["elem"]][0]
            vt = WIDTHS[vec * size]
            hint = next(iter(v["writes"].values()))[1]
            for q in range(v["c"]):
                regs = [f"ptxf_{v['name']}_s{q * vec + e}" for e in range(vec)]
                words = regs if size == 4 else [f"{regs[2 * h]} | ({regs[2 * h + 1]} << 16)" for h in range(vec // 2)]
                ptr = f"reinterpret_cast<{vt}*>({v['buf']} + ({v['base0']})" + (f" + {q * vec}" if q else "") + ")"
                value = f"make_{vt}(" + ", ".join(words) + ")"
                lines.append(f"{i1}{STORES[hint]}({ptr}, {value});" if hint else f"{i1}*{ptr} = {value};")
        rest = stmts[at + 1:]
        # each element's exit guard ends that element only (an earlier statement of the next one may have effects)
        exits = [g for kind, g, _ in m["guards"] if kind == "exit"]
        def cont(node: Node) -> bytes | None:
            return b"continue;" if node.type == "return_statement" and any(g.start_byte <= node.start_byte < g.end_byte for g in exits) else None
        scalar = "\n".join(sx.render(s, data, cont).decode() for s in rest).replace("\n", "\n" + i2)
        init = stmts[at].children_by_field_name("declarator")[0].child_by_field_name("value")
        out = (
            f"const {t} ptxf_x0 = ({t})({sx.text(init)}) * {vec};  // the first of this thread's {vec} x (transform vectorize_x)\n"
            f"{ind}const long long ptxf_xn = ({m['extent']}) * blockDim.x;  // the x the original launch covered\n"
            f"{ind}if ({' && '.join(conds)}) {{  // all {vec} in bounds, the vectors aligned\n"
            + "\n".join(lines) + "\n"
            f"{ind}}} else {{  // an edge, or an access not aligned: element by element, as written\n"
            f"{i1}for ({t} {j} = ptxf_x0; {j} < ptxf_x0 + {vec} && (long long){j} < ptxf_xn; ++{j}) {{\n"
            f"{i2}{scalar}\n"
            f"{i1}}}\n"
            f"{ind}}}"
        )
        text = sx.apply_edits(data, [(stmts[at].start_byte, rest[-1].end_byte, out.encode())])
        grid = [str(g) for g in unit.launch.grid]
        grid[0] = f"cdiv({grid[0]}, {vec})"
        launch = LaunchConfig(grid=grid, block=list(unit.launch.block), shared_mem=unit.launch.shared_mem)
        return unit.with_text(text, launch=launch, helpers=helpers, vec=VEC_BYTES)


# -- reading the kernel ---------------------------------------------------------------------------------------------


def _inlinable(unit: Unit, stmts: list[Node], j: str) -> dict[str, tuple[Node, affine.Poly | None]]:
    """Top-level integer locals besides the x index ``j`` that may be recomputed where they are read: one declarator
    with a value free of loads, calls, assignments and increments, never written. Name -> (value node, its polynomial
    with the earlier ones substituted, ``j`` kept a name, or None when it is not one: a division, a remainder)."""
    written = sx.written_names(unit.body)
    params = {a.name for a in unit.spec.args}
    out: dict[str, tuple[Node, affine.Poly | None]] = {}
    for s in stmts:
        ctype = sx.type_text(s.child_by_field_name("type"))
        if s.type != "declaration" or ctype not in sx.INT_TYPES or ctype in NARROW_TYPES:
            continue
        ds = s.children_by_field_name("declarator")
        if len(ds) != 1 or ds[0].type != "init_declarator" or not sx.is_ident(ds[0].child_by_field_name("declarator")):
            continue
        name, value = sx.text(ds[0].child_by_field_name("declarator")), ds[0].child_by_field_name("value")
        if name == j or name in written or name in out or sx.contains_type(value, ("call_expression", "subscript_expression", "pointer_expression",
                                                                      "assignment_expression", "update_expression")):
            continue
        if sx.identifiers(value) - params - set(out) - {j} - BUILTINS or _narrow_cast(value):
            continue  # it reads a local that cannot be recomputed (a loaded index, a two-declarator declaration)
        out[name] = (value, affine.poly(value, {n: p for n, (_, p) in out.items() if p is not None}))
    return out


def _dependent(j: str, locals_: dict) -> set[str]:
    """The locals whose value reads ``j``, directly or through another local."""
    dep: set[str] = set()
    for name, (value, _) in locals_.items():  # (in declaration order: a local reads only earlier ones)
        if sx.identifiers(value) & (dep | {j}):
            dep.add(name)
    return dep


def _unknown_names(node: Node, unit: Unit, locals_: dict, j: str) -> str | None:
    """Why ``node`` cannot be evaluated before the elements' code (a load, a call, a name that is not a parameter, an
    inlinable local or the x index), None where it can."""
    if sx.contains_type(node, ("subscript_expression", "pointer_expression", "assignment_expression", "update_expression")):
        return f"{sx.text(node)!r} loads or writes: it cannot be evaluated once for the thread's elements"
    for c in sx.walk(node):
        if c.type == "call_expression" and sx.call_name(c) not in sx.VALUE_FUNCS:
            return f"{sx.text(node)!r} calls {sx.text(c.child_by_field_name('function'))}"
    params = {a.name for a in unit.spec.args}
    unknown = sx.identifiers(node) - params - set(locals_) - {j} - set(sx.VALUE_FUNCS)
    if unknown:
        return f"{sx.text(node)!r} reads {', '.join(sorted(unknown))}, computed in the elements' code"
    return None


def _access(unit: Unit, n: Node) -> tuple[str, Node, str, str | None, Node] | None:
    """``(buffer, index, "read"|"write", hint, node)`` of a pointer parameter's access ``p[e]`` (node: the subscript;
    for a write, the assignment) or ``HINT(p + e)`` / ``__stcs(p + e, v)`` (node: the call); else None."""
    if n.type == "subscript_expression":
        buf = n.child_by_field_name("argument")
        if not sx.is_ident(buf) or sx.text(buf) not in unit.pointers:
            return None
        index = sx.subscript_index(n)
        if index is None:
            return None
        parent = n.parent
        if parent is not None and parent.type == "assignment_expression" and parent.child_by_field_name("left") == n:
            if sx.operator(parent) != "=":
                return sx.text(buf), index, "update", None, parent  # (plain_stores left it: not a float op=)
            return sx.text(buf), index, "write", None, parent
        if parent is not None and parent.type == "update_expression":
            return sx.text(buf), index, "update", None, parent  # x[e]++: neither a load nor a store the pass moves
        return sx.text(buf), index, "read", None, n
    if n.type == "call_expression":
        fn = sx.call_name(n)
        args = sx.call_args(n)
        if fn is None or not args or not (fn in LOADS or fn.startswith("ptxf_ldna_") or fn in STORES):
            return None
        a = sx.unparen(args[0])
        if a is None or a.type != "binary_expression" or sx.operator(a) != "+":
            return None
        left, right = sx.unparen(a.child_by_field_name("left")), a.child_by_field_name("right")
        if not sx.is_ident(left) or sx.text(left) not in unit.pointers:
            return None
        if fn in STORES:
            return (sx.text(left), right, "write", fn, n) if len(args) == 2 else None
        return (sx.text(left), right, "read", fn, n) if len(args) == 1 else None
    return None


def _understood(p, accs: list) -> bool:
    """Whether the accesses the pass read (``accs``) are every use of the buffer ``p`` that matters: no other use of
    the pointer (arithmetic, a call), no update in place (``p[e]++``), every write one of them, and, for a buffer the
    kernel writes, every read too (``*p`` or a read before the x index would see what a deferred vector store had not
    written yet)."""
    if p.other or any(a[0] == "update" for a in accs):
        return False
    writes = sum(a[0] == "write" for a in accs)
    if writes != len(p.writes):
        return False
    return not p.writes or sum(a[0] == "read" for a in accs) == len(p.reads) + len(p.loads)


def _unevaluated(n: Node, stmt: Node) -> bool:
    """Whether ``n`` is an operand of ``sizeof``, ``alignof`` or ``decltype`` within ``stmt`` (never evaluated)."""
    p = n.parent
    while p is not None and p != stmt.parent:
        if p.type in ("sizeof_expression", "alignof_expression", "decltype"):
            return True
        p = p.parent
    return False


def _conditional(n: Node, stmt: Node) -> bool:
    """Whether ``n`` is evaluated only under a condition within ``stmt`` (a ternary's branch, the right of ``&&``/``||``)."""
    child, p = n, n.parent
    while p is not None and child != stmt:
        if p.type == "conditional_expression" and child != p.child_by_field_name("condition"):
            return True
        if p.type == "binary_expression" and sx.operator(p) in ("&&", "||") and child == p.child_by_field_name("right"):
            return True
        child, p = p, p.parent
    return False


STRIDES = (1, 2, 4)  # elements a thread's x steps over in one buffer: 1 (x[i]), 2 (a pair: x[2i], x[2i + 1]), 4


def _stride_form(index: Node, j: str, offsets: dict, dependent: set[str]) -> tuple[int, tuple, int] | None:
    """``(c, base key, o)`` of an ``index`` (the locals' polynomials substituted) that is ``c * j + base + o``, ``c`` one
    of :data:`STRIDES`, ``0 <= o < c`` the constant part's remainder, ``base`` free of ``j`` and of the locals derived
    from it (the key: its monomials, the constant rounded down to a multiple of c); else None. The accesses of one
    buffer with one ``(c, key)`` and every offset ``0..c-1`` read a contiguous span of ``c`` elements per ``j``."""
    if _narrow_cast(index):
        return None  # (unsigned char)(2 * i + 100) wraps: not the polynomial its text reads as
    p = affine.poly(index, offsets)
    if p is None:
        return None
    s = affine.split(p, j)
    if s is None or set(s[0]) != {()} or s[0][()] not in STRIDES:
        return None
    c, base = s[0][()], dict(s[1])
    if any(name in dependent for mono in base for name in mono):
        return None
    const = base.pop((), 0)
    return c, (tuple(sorted(base.items())), const - const % c), const % c


NARROW_TYPES = frozenset({"short", "unsigned short", "short int", "char", "signed char", "unsigned char", "int8_t",
                          "uint8_t", "int16_t", "uint16_t", "bool"})


def _narrow_cast(node: Node) -> bool:
    """Whether ``node`` holds a cast to an integer type narrower than 32 bits (whose value wraps)."""
    return any(n.type == "cast_expression" and sx.type_text(n.child_by_field_name("type")) in NARROW_TYPES
               for n in sx.walk(node))


def _render(node: Node, data: bytes, j: str, at: str, locals_: dict) -> str:
    """``node``'s text with ``j`` replaced by ``at`` and each inlinable local by its value (recursively), so that it
    can be evaluated before the locals are declared."""
    def rep(n: Node) -> bytes | None:
        if n.type == "identifier":
            name = sx.text(n)
            if name == j:
                return f"({at})".encode()
            if name in locals_:
                return b"(" + sx.render(locals_[name][0], data, rep) + b")"
        return None

    return sx.render(node, data, rep).decode()
