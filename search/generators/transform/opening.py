"""The one-thread-per-element (or per-row, per-column) opening of a kernel body, read once for every pass that takes it
(``grid_stride``, ``vectorize``, ``rowpar``, ``colpar``, ``scan``, ``atomic_agg``).

The plain opening (every reader takes it; casts and either operand order allowed)::

    T i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;            // or: if (i < n) { ... } (or one statement) as the last statement
    ...rest...

``tolerant`` openings also take, as naive code writes them:

- local aliases of ``threadIdx.x``, ``blockIdx.x`` or ``blockDim.x`` declared before the index and read nowhere but in
  its initialiser (``int tid = threadIdx.x; int i = blockIdx.x * blockDim.x + tid;``);
- a whole index value in a cast (``size_t i = (size_t)(blockIdx.x * blockDim.x + threadIdx.x);``);
- extra uniform parts of the guard (:attr:`ElementGuard.extra`): ``if (i >= n || N <= 0) return;`` (a disjunction
  before a ``return``), ``if (i < n && N > 0) {...}`` (a conjunction before the guarded block); a uniform part reads
  only scalar parameters, literals and batch indices (below), none of them written in the body: no memory, no calls;
- ``if (i < n) {...} return;`` (a bare ``return`` after the guarded block);
- pure declarations before the index (:func:`pure_declaration`: uniform over the grid, never written), left in place
  (the guard may read them: ``int total = N * C * H * W; ... if (i >= total) return;``).

``between``: declarations between the index and the guard (no calls, writing nothing but what they declare) belong to
``rest`` (rowpar's reading: they run on every lane). ``shared``: other declarators in the index's declaration
(``int i = ..., j;``). ``batch``: a 2-D or 3-D grid whose ``y``/``z`` index is a block-uniform batch index read as
``T b = blockIdx.y;`` (or ``z``; declared among the opening's declarations, never written), with a 1-D block; every
grid dimension past ``x`` other than the literal 1 must be read so (:attr:`ElementGuard.batch`). Each option is the
caller's promise that its rewrite keeps what the option lets in (the extra conditions, the other declarators, the
grid's dimensions past ``x``).
"""
from __future__ import annotations

from typing import NamedTuple

from . import syntax as sx
from .base import Unit
from .syntax import Node

BUILTINS = frozenset({"threadIdx", "blockIdx", "blockDim", "gridDim"})
ALIASED = (("threadIdx", "x"), ("blockIdx", "x"), ("blockDim", "x"))  # what an alias before the index may stand for
# node types an extra (uniform) part of the guard may hold besides identifiers
_UNIFORM_TYPES = frozenset({
    "number_literal", "true", "false", "binary_expression", "unary_expression", "parenthesized_expression",
    "cast_expression", "type_descriptor", "primitive_type", "sized_type_specifier", "type_identifier", "type_qualifier",
    "conditional_expression",
})


IMPURE = ("call_expression", "subscript_expression", "pointer_expression", "field_expression", "assignment_expression",
           "update_expression", "array_declarator", "storage_class_specifier", "lambda_expression")


def pure_declaration(stmt: Node) -> bool:
    """Whether ``stmt`` is a declaration whose value is the same for every thread wherever it runs before anything is
    written: no call, memory access, assignment, increment, ``__shared__``/``volatile``/``static``, array declarator
    or ``threadIdx``/``blockIdx``/``blockDim``/``gridDim`` (literals, scalar parameters and other such names only)."""
    if stmt.type != "declaration" or sx.contains_type(stmt, IMPURE):
        return False
    if any(n.type == "type_qualifier" and sx.text(n) in ("__shared__", "volatile") for n in sx.walk(stmt)):
        return False
    return not (sx.identifiers(stmt) & BUILTINS)


class ElementGuard(NamedTuple):
    """The one-thread-per-element opening of a kernel body: the index ``name`` (its type node and initial
    value), the bound ``n`` of the guard, the statements guarded, and the byte span from the index's
    declaration to the end of the guarded code. Tolerant readings add: ``extra``, the guard's uniform parts
    (leave conditions when ``early``, stay conditions otherwise); ``batch``, ``(name, "y"|"z")`` of the
    block-uniform batch indices; ``decl`` and ``guard``, the index's declaration and the guard's ``if``."""

    name: str
    type_node: Node
    init: Node
    bound: Node
    rest: list[Node]
    start: int
    end: int
    extra: tuple = ()
    early: bool = True
    batch: tuple = ()
    decl: Node | None = None
    guard: Node | None = None

    def keep(self) -> str:
        """The condition under which the element is processed, as C text (``i < n`` and the extra parts)."""
        out = f"{self.name} < {paren(self.bound)}"
        if self.extra:
            parts = " || ".join(f"({sx.text(e)})" for e in self.extra)
            out += f" && !({parts})" if self.early else "".join(f" && ({sx.text(e)})" for e in self.extra)
        return out


def element_guard(unit: Unit, *, tolerant: bool = False, between: bool = False, shared: bool = False,
                  batch: bool = False, why: list[str] | None = None) -> ElementGuard | None:
    """The module docstring's opening at the start of a ``policy = "free"`` kernel's body with a 1-D block (a 1-D grid
    unless ``batch``), with at least one statement guarded; None when it is not there (``why`` gets the reason when
    it says more than "no opening")."""

    def no(msg: str | None = None) -> None:
        if msg and why is not None:
            why.append(msg)
        return None

    if unit.body is None or unit.spec.launch.policy != "free" or not unit.block_is_1d():
        return None
    grid = unit.launch.grid
    if len(grid) != 1 and not (batch and len(grid) <= 3):
        return no("the launch's grid is not 1-D" if not batch else "the grid has more than 3 dimensions")
    stmts = sx.statements(unit.body)
    aliases: dict[str, tuple[str, str]] = {}
    batches: list[tuple[str, str]] = []
    k, index, decl = 0, None, None
    while k < len(stmts) and index is None:
        s = stmts[k]
        a = _builtin_decl(s, ALIASED) if tolerant else None
        bv = _builtin_decl(s, (("blockIdx", "y"), ("blockIdx", "z"))) if batch else None
        if a is not None:
            aliases[a[0]] = a[1]
        elif bv is not None:
            batches.append((bv[0], bv[1][1]))
        elif (tolerant and pure_declaration(s) and not (sx.declared_names(s) & sx.written_names(unit.body))
              and not (sx.identifiers(s) & (set(aliases) | {b for b, _ in batches}))):  # (int r = bx * bd + tid;: the index)
            pass  # a uniform declaration before the index (int total = N * C;): it stays where it is, outside the span
        else:
            index = _index_decl(s, aliases, shared=shared, cast=tolerant)
            if index is None:
                if not tolerant and pure_declaration(s):
                    return no(f"line {s.start_point[0] + 1}: {_short(s)} comes before the index (blockIdx.x * "
                              "blockDim.x + threadIdx.x): this pass reads the index as the body's first statement")
                if any(sx.is_builtin(n, "gridDim", f) for n in sx.walk(s) for f in "xyz"):
                    return no(f"line {s.start_point[0] + 1}: {_short(s)} reads gridDim: the kernel strides over the grid "
                              "itself (these passes take one thread per element: blockIdx.x * blockDim.x + threadIdx.x, "
                              "then a guard)")
                return no(f"line {s.start_point[0] + 1}: {_short(s)} is neither the index (blockIdx.x * blockDim.x + "
                          "threadIdx.x) nor a declaration of parameters and literals before it")
            decl = s
        k += 1
    if index is None:
        return no("no statement declares the index")
    name, type_node, init = index
    mids: list[Node] = []
    while k < len(stmts) - 1 and stmts[k].type == "declaration":
        s = stmts[k]
        bv = _builtin_decl(s, (("blockIdx", "y"), ("blockIdx", "z"))) if batch else None
        if bv is not None:
            batches.append((bv[0], bv[1][1]))
        elif between and not sx.contains_type(s, ("call_expression",)) and not (sx.written_names(s) - sx.declared_names(s)):
            mids.append(s)
        else:
            break
        k += 1
    body_written = sx.written_names(unit.body)
    for b, dim in batches:
        if b in body_written:
            return no(f"the batch index {b!r} (blockIdx.{dim}) is written")
    read = {d for _, d in batches}
    for dim, g in zip("yz", grid[1:]):
        if dim not in read and str(g).strip() != "1":
            return no(f"grid.{dim} ({g}) is not read as a block-uniform batch index (T b = blockIdx.{dim}; with a 1-D block)")
    if not _aliases_ok(unit, aliases, decl, init, body_written):
        return no("an alias of threadIdx/blockIdx/blockDim is used past the index or written")
    if k >= len(stmts):
        return no("nothing after the index")
    guard = stmts[k]
    if guard.type != "if_statement" or guard.child_by_field_name("alternative") is not None:
        return no(f"line {guard.start_point[0] + 1}: {_short(guard)} where the guard (if without else) was expected")
    cond = sx.unparen(guard.child_by_field_name("condition").child_by_field_name("value"))
    cons = guard.child_by_field_name("consequence")
    early = is_bare_return(cons)
    parts = sx.operands(cond, "||" if early else "&&") if tolerant else [cond]
    ops = ((">=",), ("<=",)) if early else (("<",), (">",))
    found = [(p, b) for p in parts if (b := _bound(p, name, *ops)) is not None]
    if len(found) != 1:
        return no(f"the guard's condition {_short(cond)} does not bound {name} once ({name} >= n before a return, "
                  f"or {name} < n around the rest)")
    here, bound = found[0]
    extra = tuple(p for p in parts if p is not here)
    uniform = _scalar_params(unit) | {b for b, _ in batches}
    for e in extra:
        bad = _not_uniform(e, uniform, body_written)
        if bad:
            return no(f"the guard's part {sx.text(e)!r} is not uniform: {bad}")
    if early:
        rest = stmts[k + 1:]
    else:
        tail = stmts[k + 1:]
        if tail and not (tolerant and len(tail) == 1 and is_bare_return(tail[0])):
            return no(f"line {tail[0].start_point[0] + 1}: {_short(tail[0])} after the guarded block")
        rest = sx.statements(cons) if cons.type == "compound_statement" else [cons]
    if not rest:
        return no("the guard leaves nothing to do")
    return ElementGuard(name, type_node, init, bound, mids + rest, decl.start_byte, stmts[-1].end_byte, extra, early,
                        tuple(batches), decl, guard)


def element_hazard(stmt: Node, index: str, bound_names: set[str], *, loop_ok=None) -> str | None:
    """Why the element's statement ``stmt`` may not run for several elements in one thread (``grid_stride``'s loop,
    ``coarsen``'s K, ``vectorize``'s tail), None when it may: a ``return``/``goto``/label (it would leave the loop), a
    barrier or warp collective, ``__shared__``/``static`` data, ``threadIdx``/``blockIdx``/``blockDim``/``gridDim``
    (the element's position in the grid changes), a write to the index or a name in its bound. With ``loop_ok`` (a
    predicate on loop nodes), also any loop it does not accept (a thread per row must not take several rows)."""
    for n in sx.walk(stmt):
        if loop_ok is not None and n.type in sx.LOOPS and not loop_ok(n):
            kind = {"for_statement": "for", "while_statement": "while", "do_statement": "do"}.get(n.type, "range for")
            return f"a {kind} loop in the element's code: a row loop is rowpar's, and a thread per row must not take several rows"
        if n.type in ("return_statement", "goto_statement", "labeled_statement"):
            return f"{n.type.removesuffix('_statement').replace('_', ' ')} in the element's code ({sx.text(n)[:40]!r})"
        if n.type == "call_expression" and sx.call_name(n) in sx.COLLECTIVES:
            kind = "a barrier" if sx.call_name(n) in sx.BARRIERS else "a warp collective"
            return f"{kind} ({sx.call_name(n)}) in the element's code"
        if n.type in ("type_qualifier", "storage_class_specifier") and sx.text(n) in ("__shared__", "static"):
            return f"{sx.text(n)} data in the element's code"
    used = sx.identifiers(stmt) & BUILTINS
    if used:
        return f"the element's code reads {', '.join(sorted(used))} (its position in the grid changes)"
    written = sx.written_names(stmt) & ({index} | bound_names)
    if written:
        return f"the element's code writes {', '.join(sorted(written))} (the index or a name in the bound)"
    return None


def _short(node: Node, n: int = 50) -> str:
    """A statement's text on one line, cut at ``n`` characters, quoted."""
    t = " ".join(sx.text(node).split())
    return repr(t if len(t) <= n else t[: n - 3] + "...")


def _builtin_decl(stmt: Node, which) -> tuple[str, tuple[str, str]] | None:
    """``(name, (var, field))`` of ``T name = var.field;`` (one declarator, a cast allowed) for ``(var, field)`` in ``which``."""
    if stmt.type != "declaration":
        return None
    ds = stmt.children_by_field_name("declarator")
    if len(ds) != 1 or ds[0].type != "init_declarator" or not sx.is_ident(ds[0].child_by_field_name("declarator")):
        return None
    if sx.type_text(stmt.child_by_field_name("type")) not in sx.INT_TYPES:
        return None
    value = ds[0].child_by_field_name("value")
    for var, f in which:
        if sx.is_builtin(value, var, f):
            return sx.text(ds[0].child_by_field_name("declarator")), (var, f)
    return None


def _is(node: Node | None, var: str, aliases: dict[str, tuple[str, str]], f: str = "x") -> bool:
    """``node`` is ``var.f`` or an alias of it (casts and parentheses allowed)."""
    if sx.is_builtin(node, var, f):
        return True
    n = sx.uncast(node)
    return sx.is_ident(n) and aliases.get(sx.text(n)) == (var, f)


def _index_decl(stmt: Node, aliases: dict[str, tuple[str, str]] | None = None, *, shared: bool = False,
                cast: bool = False) -> tuple[str, Node, Node] | None:
    """``(name, type node, initial value)`` of ``T i = blockIdx.x * blockDim.x + threadIdx.x;`` (through ``aliases``;
    other declarators in the declaration when ``shared``; the whole value in a cast when ``cast``)."""
    aliases = aliases or {}
    if stmt.type != "declaration":
        return None
    ds = stmt.children_by_field_name("declarator")
    if not ds or (len(ds) != 1 and not shared):
        return None
    if any(c.type == "type_qualifier" and sx.text(c) != "const" for c in stmt.children):
        return None
    for d in ds:
        if d.type != "init_declarator" or not sx.is_ident(d.child_by_field_name("declarator")):
            continue
        value = d.child_by_field_name("value")
        e = sx.uncast(value) if cast else sx.unparen(value)
        if e is None or e.type != "binary_expression" or sx.operator(e) != "+":
            continue
        a, b = e.child_by_field_name("left"), e.child_by_field_name("right")
        if _is(a, "threadIdx", aliases):
            a, b = b, a
        if not _is(b, "threadIdx", aliases):
            continue
        prod = sx.uncast(a)
        if prod is None or prod.type != "binary_expression" or sx.operator(prod) != "*":
            continue
        factors = (prod.child_by_field_name("left"), prod.child_by_field_name("right"))
        if {v for f in factors for v in ("blockIdx", "blockDim") if _is(f, v, aliases)} != {"blockIdx", "blockDim"}:
            continue
        others = [o for o in ds if o is not d]
        if any(o.type == "init_declarator" and sx.identifiers(o.child_by_field_name("value")) & BUILTINS for o in others):
            return None  # another declarator tied to the thread's position
        return sx.text(d.child_by_field_name("declarator")), stmt.child_by_field_name("type"), value
    return None


def _aliases_ok(unit: Unit, aliases: dict, decl: Node | None, init: Node | None, written: set[str]) -> bool:
    """Every alias is read only in the index's initialiser, and never written."""
    if not aliases:
        return True
    if set(aliases) & written:
        return False
    for n in sx.walk(unit.body):
        if n.type != "identifier" or sx.text(n) not in aliases:
            continue
        if init is not None and init.start_byte <= n.start_byte < init.end_byte:
            continue
        p = n.parent
        if p is not None and p.type == "init_declarator" and p.child_by_field_name("declarator") == n:
            continue  # the alias's own declaration
        return False
    return True


def _scalar_params(unit: Unit) -> set[str]:
    """The kernel's parameters that are plain values (no pointer, array or reference)."""
    decl = sx.function_declarator(unit.fn)
    out = set()
    for p in decl.child_by_field_name("parameters").named_children:
        d = p.child_by_field_name("declarator") if p.type == "parameter_declaration" else None
        if sx.is_ident(d):
            out.add(sx.text(d))
    return out


def _not_uniform(e: Node, uniform: set[str], written: set[str]) -> str | None:
    """Why ``e`` may differ between threads of a block or change in the body (None when it cannot)."""
    for n in sx.walk(e):
        if n.type == "identifier":
            if sx.text(n) not in uniform:
                return f"{sx.text(n)!r} is not a scalar parameter or a batch index"
            if sx.text(n) in written:
                return f"{sx.text(n)!r} is written in the body"
        elif n.is_named and n.type not in _UNIFORM_TYPES:
            return f"it holds {n.type.replace('_', ' ')} {sx.text(n)!r} (memory, a call or a write)"
    return None


def _bound(cond: Node | None, name: str, ops_left: tuple[str, ...], ops_right: tuple[str, ...]) -> Node | None:
    """``n`` of ``i <op> n`` (op in ops_left) or ``n <op> i`` (op in ops_right)."""
    if cond is None or cond.type != "binary_expression":
        return None
    left, right, op = cond.child_by_field_name("left"), cond.child_by_field_name("right"), sx.operator(cond)
    if op in ops_left and sx.is_ident(sx.unparen(left), name):
        return right
    if op in ops_right and sx.is_ident(sx.unparen(right), name):
        return left
    return None


def is_bare_return(node: Node | None) -> bool:
    """``node`` is ``return;`` or ``{ return; }``."""
    if node is not None and node.type == "compound_statement":
        stmts = sx.statements(node)
        node = stmts[0] if len(stmts) == 1 else None
    return node is not None and node.type == "return_statement" and node.named_child_count == 0


def paren(node: Node) -> str:
    t = sx.text(node)
    simple = ("identifier", "number_literal", "parenthesized_expression", "field_expression", "cast_expression",
              "subscript_expression", "call_expression")
    return t if node.type in simple else f"({t})"
