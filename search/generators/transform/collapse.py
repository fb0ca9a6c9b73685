"""``collapse``: two perfectly nested map loops of a one-thread-per-row kernel -> one loop over both, for rowpar to split.

Pattern, in the row's code of :mod:`.rowpar`'s opening (one thread per row, then the row's code)::

    for (int h = a; h < H; ++h) {        // carries nothing from one iteration to the next
        const T* xv = x + (t * H + h) * D;   // declarations with pure initialisers (any number)
        for (int i = b; i < n; ++i) {    // bounds free of h and of what the outer body writes
            body
        }
    }

becomes::

    if (a < H && b < n) {  // the nest over h, i as one loop (transform collapse)
        for (long long ptxf_f = 0; ptxf_f < (long long)((long long)(H) - a) * ((long long)(n) - b); ++ptxf_f) {
            int h = (int)(a + ptxf_f / ((long long)(n) - b));
            int i = (int)(b + ptxf_f % ((long long)(n) - b));
            const T* xv = x + (t * H + h) * D;
            { body }
        }
    }

The same (h, i) pairs in the same order, so the pass alone is exact; its point is rowpar's next step, which splits the
one loop over ``H * n`` iterations (and sizes rowpar_auto's lanes from that) where it split only the inner loop over
``n``. The guard keeps empty ranges empty (two negative trip counts would multiply to a positive one) and tells rowpar
that both trip counts are positive (:func:`.affine.collapsed_nest` reads the loop back for its dependence test).

Index type: the flat index and the product are ``long long`` (``unsigned long long`` when a loop's index is an
unsigned 64-bit type), so ``H * n`` of two ``int`` bounds cannot overflow; each digit is cast back to its loop's type,
whose range held it before. A head ``for (h = a; ...)`` over an ``h`` declared before becomes the assignment
``h = ...;``; it needs ``h`` read nowhere after the loop.

Only nests that rowpar_auto then splits are rewritten (the pass checks the result: a 3-deep nest gets its inner two
loops collapsed, since rowpar would not split a loop over the outer two with a serial loop inside). Refused, with the
reason: no rowpar opening; a loop not ``for (T h = a; h < b; ++h)`` (``<=``, ``b > h``, ``h++``, ``h += 1``, ``h = h + 1``,
or ``h = a`` over a declared ``h``); an outer body that is not declarations followed by one loop; a declaration
without an initialiser, of an array or reference, or ``static``/``__shared__``; an initialiser or bound that assigns,
increments, calls a function that is not pure math or a load, or reads a buffer the kernel writes; a declared name
written in the nest or named like the inner index; inner bounds that use ``h``, a declaration of the outer body or a
name the nest writes; outer bounds the nest writes; an index written in the bodies; ``break``, ``continue``,
``return`` or ``goto`` in the outer body; a declaration of the outer body that reads a variable the nest carries
(a sum over both loops: the collapsed loop updates it in the same order, so a reduction over a channel's images and
pixels becomes one loop rowpar splits whole); and a result rowpar would not split (its reason).
"""
from __future__ import annotations

from dataclasses import dataclass

from . import syntax as sx
from .affine import mul, poly, split
from .base import LOAD_FUNCS, Unit
from .opening import paren
from .reductions import PURE_CALLS
from .rowpar import (PlannedPass, Refused, RowParallelPass, _base_name, _local_arrays, _row_guard, _row_loop, access_base,
                     pointer_roots, step_one_bound, value_dead_after, written_roots)
from .syntax import Node

FLAT = "ptxf_f"
UNSIGNED_64 = frozenset({"size_t", "unsigned long", "unsigned long int", "unsigned long long", "unsigned long long int",
                         "uint64_t"})
JUMPS = ("break_statement", "continue_statement", "return_statement", "goto_statement", "labeled_statement")


@dataclass(frozen=True)
class Head:
    """``for (T h = lo; h < hi; ++h)`` read: the index, its type, its bounds, ``<=`` or not, declared by the loop or not."""

    name: str
    ctype: str
    lo: Node
    hi: Node
    inclusive: bool
    declared: bool


class CollapsePass(PlannedPass):
    """Perfectly nested map loops of the row's code -> one loop over both (see the module docstring)."""

    name = "collapse"
    group = "nest"  # keeps the launch: chains take it before rowpar, and are built without it too (OPTIONAL_GROUPS)
    exact = True

    def __init__(self) -> None:
        self.rowpar = RowParallelPass("auto")

    def _plan(self, unit: Unit) -> list[tuple[int, int, bytes]]:
        if unit.body is None:
            raise Refused("no kernel body")
        g = _row_guard(unit, batch=True) or _row_loop(unit)
        if g is None:
            raise Refused("not one thread per row (rowpar's opening: index = blockIdx.x * blockDim.x + threadIdx.x, "
                          "then a guard)")
        nests = [n for s in g.rest for n in sx.walk(s) if n.type == "for_statement" and _shape(n)]
        if not nests:
            raise Refused("no loop whose body is declarations followed by one for loop")
        edits: list[tuple[int, int, bytes]] = []
        done: list[Node] = []
        why: list[str] = []
        taken = sx.identifiers(unit.fn)
        for outer in nests:
            if any(d.start_byte <= outer.start_byte < d.end_byte for d in done):
                continue
            flat = next(f"{FLAT}{k or ''}" for k in range(len(nests) + len(taken) + 1) if f"{FLAT}{k or ''}" not in taken)
            line = f"line {outer.start_point[0] + 1}"
            try:
                mine = self._rewrite(unit, outer, flat)
                self._split_by_rowpar(unit.with_text(sx.apply_edits(unit.data, edits + mine)), flat)
            except Refused as e:
                why.append(f"{line}: {e}")
                continue
            edits += mine
            done.append(outer)
            taken.add(flat)
        if not edits:
            raise Refused("; ".join(why))
        return edits

    def apply(self, unit: Unit) -> Unit:
        return unit.with_text(sx.apply_edits(unit.data, self._plan(unit)))

    def _split_by_rowpar(self, u: Unit, flat: str) -> None:
        """Refuses unless rowpar_auto takes ``u`` and splits the loop over ``flat``."""
        try:
            _, rw, _ = self.rowpar._plan(u)
        except Refused as e:
            raise Refused(f"rowpar would not split the collapsed loop: {e}") from None
        if not any(j == flat for _, j in rw.loops):
            loop = next(n for n in sx.walk(u.fn) if n.type == "for_statement" and flat in sx.declared_names(
                n.child_by_field_name("initializer")))
            at = f"line {loop.start_point[0] + 1}: "
            kept = [w[len(at):] for w in rw.kept_serial if w.startswith(at)]
            raise Refused("rowpar would not split the collapsed loop" + "".join(f" ({k})" for k in kept[:1]))

    def _rewrite(self, unit: Unit, outer: Node, flat: str) -> list[tuple[int, int, bytes]]:
        """The edits collapsing ``outer`` and its inner loop into one loop over ``flat``; raises :class:`Refused`."""
        body = outer.child_by_field_name("body")
        stmts = sx.statements(body)
        inner, decls = stmts[-1], stmts[:-1]
        ho, hi = _head(unit, outer), _head(unit, inner)
        if ho is None or hi is None:
            raise Refused("not for (T h = a; h < b; ++h) around for (T i = c; i < d; ++i)")
        h, i = ho.name, hi.name
        if h == i:
            raise Refused(f"both loops run over {h}")
        if sx.contains_type(body, JUMPS):
            raise Refused("break, continue, return or goto in the outer body")
        if h in sx.written_names(body) or i in sx.written_names(inner.child_by_field_name("body")):
            raise Refused(f"{h if h in sx.written_names(body) else i} is written in the loop's body")
        # what the nest carries across iterations (a sum over both loops) is updated in the inner loop alone (the outer
        # body holds only pure declarations): the collapsed loop makes the same updates in the same order, so rowpar
        # may then split the whole reduction; a declaration that reads it would read it once per inner iteration
        carried = sx.written_names(outer) - sx.declared_names(outer) - {x.name for x in (ho, hi) if not x.declared}
        read = set().union(*(sx.identifiers(d) for d in decls)) & carried if decls else set()
        if read:
            raise Refused(f"a declaration of the outer body reads {', '.join(sorted(read))}, which the nest updates")
        if carried and decls and sx.contains_type(unit.body, ("reference_declarator",)):
            # (float& acc = total; a declaration reading total reads what the nest updates through acc)
            raise Refused("a reference declared in the kernel may alias what the nest updates, and the outer body "
                          "declares names")
        written = sx.written_names(outer)
        roots = pointer_roots(unit)
        buffers = written_roots(unit.body, roots, _local_arrays(unit.body))
        names: set[str] = set()
        for d in decls:
            names |= _declaration(d, buffers, roots)
        if names & written:
            raise Refused(f"{', '.join(sorted(names & written))}: declared in the outer body and written in the nest")
        if i in names or h in names or any(i in sx.identifiers(d) for d in decls):
            raise Refused(f"a declaration of the outer body declares or reads the name {i if i in names else h}")
        for x, bad in ((ho, written), (hi, written | names | {h})):
            for b in (x.lo, x.hi):
                if sx.identifiers(b) & bad:
                    raise Refused(f"the bound {sx.text(b)!r} of {x.name} uses {', '.join(sorted(sx.identifiers(b) & bad))}")
                why = _impure(b, buffers, roots)
                if why:
                    raise Refused(f"the bound {sx.text(b)!r}: {why}")
        for x in (ho, hi):
            if not x.declared and not value_dead_after(unit.fn, outer, x.name):
                raise Refused(f"{x.name} (declared before the loop) is read after it")
        ftype = "unsigned long long" if {ho.ctype, hi.ctype} & UNSIGNED_64 else "long long"
        n_o, n_i = _trip(ho, ftype), _trip(hi, ftype)
        guard = " && ".join(f"{paren(x.lo)} {'<=' if x.inclusive else '<'} {paren(x.hi)}" for x in (ho, hi))
        inner_ind = sx.line_indent(unit.data, inner.start_byte)[0].decode()
        digits = [_digit(x, f"{flat} {op} ({n_i})") for x, op in ((ho, "/"), (hi, "%"))]
        ib, at = inner.child_by_field_name("body"), outer.start_byte
        folds, needed = _fold_indices(ib, ho, hi, flat) if not decls else ([], True)
        head = (f"for ({ftype} {flat} = 0; {flat} < ({ftype})({n_o}) * ({n_i}); ++{flat}) {{"
                + "".join(f"\n{inner_ind}{d}" for d in digits if needed))
        nest = sx.apply_edits(outer.text, [(0, body.start_byte + 1 - at, head.encode()), (inner.start_byte - at, ib.start_byte - at, b"")]
                              + [(a - at, b - at, t) for a, b, t in folds])
        ind = sx.line_indent(unit.data, outer.start_byte)[0].decode()
        text = (f"if ({guard}) {{  // the nest over {h}, {i} as one loop (transform collapse)\n{ind}    "
                + nest.decode().replace("\n", "\n    ") + f"\n{ind}}}")
        return [(outer.start_byte, outer.end_byte, text.encode())]


def _fold_indices(body: Node, ho: Head, hi: Head, flat: str) -> tuple[list[tuple[int, int, bytes]], bool]:
    """Subscripts (and the hints' loads, ``__ldg(p + index)``) of the inner body ``body`` at ``q + c * (h * n + i)`` (``n`` the inner loop's bound, both loops from 0,
    ``c`` an integer, ``q`` free of both) read at ``q + c * flat``: a contiguous sum over a nest (``in[b * H * W + h * W
    + w]``) becomes one at the flat index, which ``vector_loops`` then widens, with no division each element. Returns
    the edits (bytes of the outer loop's text) and whether the digits are still read (their declarations kept)."""
    h, i = ho.name, hi.name
    if not (sx.is_number(ho.lo, 0) and sx.is_number(hi.lo, 0)) or ho.inclusive or hi.inclusive:
        return [], True
    n = poly(hi.hi)
    if n is None or {h, i} & set(sx.identifiers(hi.hi)):
        return [], True
    edits, spans = [], []
    for node in sx.walk(body):
        if node.type == "subscript_expression":
            idx = sx.subscript_index(node)
        elif node.type == "call_expression" and ((sx.call_name(node) or "") in LOAD_FUNCS
                                                 or (sx.call_name(node) or "").startswith("ptxf_ldna_")) and sx.call_args(node):
            arg = sx.unparen(sx.call_args(node)[0])  # __ldg(p + (index)): the hints' form
            idx = arg.child_by_field_name("right") if arg is not None and arg.type == "binary_expression" \
                and sx.operator(arg) == "+" else None
        else:
            continue
        p = poly(idx) if idx is not None else None
        if p is None or not ({h, i} & {x for m in p for x in m}):
            continue
        ph = split(p, h)
        pw = split(ph[1], i) if ph is not None else None
        if pw is None:
            continue
        a_w, q = pw
        if list(a_w) != [()] or {h, i} & {x for m in q for x in m} or ph[0] != mul(a_w, n):
            continue
        c = a_w[()]
        zeroed = _zeroed(idx, {h, i})
        term = flat if c == 1 else f"({c}) * {flat}"
        edits.append((idx.start_byte, idx.end_byte, f"({zeroed}) + {term}".encode()))
        spans.append((idx.start_byte, idx.end_byte))
    needed = any(sx.is_ident(nd) and sx.text(nd) in (h, i) and not any(a <= nd.start_byte < b for a, b in spans)
                 for nd in sx.walk(body))
    return edits, needed


def _zeroed(node: Node, names: set[str]) -> str:
    """``node``'s text with each of ``names`` read as 0 (the index's part free of the loop digits)."""
    out, pos, base = [], node.start_byte, node.start_byte
    text = node.text
    for nd in sx.walk(node):
        if sx.is_ident(nd) and sx.text(nd) in names:
            out.append(text[pos - base:nd.start_byte - base])
            out.append(b"0")
            pos = nd.end_byte
    out.append(text[pos - base:])
    return b"".join(out).decode()


def _shape(loop: Node) -> bool:
    """``loop``'s body is a block of declarations followed by one ``for`` loop."""
    body = loop.child_by_field_name("body")
    stmts = sx.statements(body) if body is not None and body.type == "compound_statement" else []
    return bool(stmts) and stmts[-1].type == "for_statement" and all(s.type == "declaration" for s in stmts[:-1])


def _head(unit: Unit, loop: Node) -> Head | None:
    """The :class:`Head` of a canonical ``for`` loop over an integer index, else None."""
    init, cond, upd = (loop.child_by_field_name(f) for f in ("initializer", "condition", "update"))
    if init is None or cond is None or upd is None:
        return None
    if init.type == "declaration":
        ds = init.children_by_field_name("declarator")
        if len(ds) != 1 or ds[0].type != "init_declarator" or not sx.is_ident(ds[0].child_by_field_name("declarator")):
            return None
        name, lo, declared = sx.text(ds[0].child_by_field_name("declarator")), ds[0].child_by_field_name("value"), True
        ctype = sx.type_text(init.child_by_field_name("type"))
    else:
        a = sx.unparen(init)
        if a is None or a.type != "assignment_expression" or sx.operator(a) != "=" \
                or not sx.is_ident(sx.unparen(a.child_by_field_name("left"))):
            return None
        name, lo, declared = sx.text(sx.unparen(a.child_by_field_name("left"))), a.child_by_field_name("right"), False
        ctype = unit.types.scalar.get(name) if sx.declaration_counts(unit.fn).get(name) == 1 else None
    bound = step_one_bound(cond, upd, name) if ctype in sx.INT_TYPES else None
    return None if bound is None else Head(name, ctype, lo, bound[0], bound[1], declared)


def _trip(x: Head, ftype: str) -> str:
    """``x``'s trip count as an expression (in ``ftype`` unless it is the bare bound)."""
    if sx.is_number(x.lo, 0) and not x.inclusive:
        return sx.text(x.hi)
    lo = sx.text(x.lo)
    minus = f" + {lo[1:]}" if lo.startswith("-") and lo[1:].isdigit() else f" - ({lo})" if lo.startswith("-") else f" - {paren(x.lo)}"
    n = f"({ftype})({sx.text(x.hi)})" + ("" if sx.is_number(x.lo, 0) else minus)
    return n + (" + 1" if x.inclusive else "")


def _digit(x: Head, part: str) -> str:
    """The statement giving ``x``'s index its value from the flat index (``part``: ``f / (n)`` or ``f % (n)``)."""
    value = f"({x.ctype})({part})" if sx.is_number(x.lo, 0) else f"({x.ctype})({paren(x.lo)} + {part})"
    return f"{x.ctype} {x.name} = {value};" if x.declared else f"{x.name} = {value};"


def _declaration(d: Node, buffers: set[str], roots: dict[str, str]) -> set[str]:
    """The names a declaration of the outer body declares; raises :class:`Refused` unless each is a plain name or
    pointer with a pure initialiser."""
    if any(c.type in ("storage_class_specifier", "type_qualifier") and sx.text(c) in ("static", "__shared__", "extern")
           for c in d.children):
        raise Refused(f"a static or shared declaration in the outer body: {sx.text(d)!r}")
    out = set()
    for decl in d.children_by_field_name("declarator"):
        inner = decl.child_by_field_name("declarator") if decl.type == "init_declarator" else None
        if decl.type != "init_declarator" or inner is None or inner.type not in ("identifier", "pointer_declarator") \
                or not sx.is_ident(sx.innermost_identifier(inner)) or sx.innermost_identifier(inner).parent.type not in (
                    "init_declarator", "pointer_declarator"):
            raise Refused(f"not a plain initialised declaration: {sx.text(d)!r}")
        why = _impure(decl.child_by_field_name("value"), buffers, roots)
        if why:
            raise Refused(f"{sx.text(d)!r}: {why}")
        out.add(sx.text(sx.innermost_identifier(inner)))
    return out


def _impure(node: Node | None, buffers: set[str], roots: dict[str, str]) -> str | None:
    """Why ``node``'s value may change when evaluated again within the nest (None when it cannot): an assignment or
    increment, a call that is not pure math or a load, a read of a buffer the kernel writes (``buffers``)."""
    for n in sx.walk(node) if node is not None else ():
        if n.type in ("assignment_expression", "update_expression", "comma_expression"):
            return f"{sx.text(n)!r} has a side effect"
        if n.type == "call_expression":
            fn = n.child_by_field_name("function")
            if fn is not None and fn.type in ("primitive_type", "type_identifier", "sized_type_specifier"):
                continue  # float(x): a cast
            if sx.call_name(n) not in PURE_CALLS:
                return f"calls {sx.text(fn)!r}"
            args = sx.call_args(n)
            if sx.call_name(n) in LOAD_FUNCS and (not args or roots.get(_base_name(args[0]) or "") in (None, *buffers)):
                return f"{sx.text(n)!r} loads from a buffer the kernel may write"
        if n.type == "field_expression" and sx.text(n.child_by_field_name("operator")) == "->":
            return f"reads memory through {sx.text(n)!r}"
        if n.type == "subscript_expression" or (n.type == "pointer_expression" and sx.operator(n) == "*"):
            root = roots.get(access_base(n) or "")
            if root is None or root in buffers:
                return f"reads {sx.text(n)!r}, which the kernel may write"
    return None
