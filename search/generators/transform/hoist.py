"""``hoist``: what a thread reads again in every iteration of a loop, read once before it into registers.

Pattern (a k-means assignment, attention scores, a nearest-neighbour search: a thread compares its own row with
many others)::

    for (int k = 0; k < K; k++) {                  // the enclosing loop: for, while or do
        float d = 0.0f;
        for (int j = 0; j < 32; j++) {             // a literal trip count (after specialise: j < ((int)32))
            float diff = x[i * 32 + j] - c[k * 32 + j];   // x[E]: E reads j and names the enclosing loop never writes
            d += diff * diff;
        }
        ...
    }

becomes::

    float ptxf_hold0[32];                          // x's element type
    { int k = 0; if (k < K) {                      // only when the enclosing loop runs at all (its first test)
    #pragma unroll
    for (int j = 0; j < 32; j++) { ptxf_hold0[j - (0)] = x[i * 32 + j]; }
    } }
    for (int k = 0; k < K; k++) { ... #pragma unroll  for (int j ...) { float diff = ptxf_hold0[j - (0)] - ...

The inner loop is unrolled fully (``#pragma unroll`` added), so the array's indices are constants and it lives in
registers. Without it the loads of ``x`` sit inside the enclosing loop (NVCC did not hoist them out of the centroid
loop of ``bench/trials/kmeans_assign`` after ``specialise``: 64 loads an iteration, x's 32 among them), each
iteration reading the row again through L1. Exact: the same loads (the same form, ``x[E]`` or ``__ldg(x + E)``), of a
buffer the kernel never writes, made earlier; the arithmetic is untouched.

Applies to an inner ``for (int j = a; j < b; j++)`` with literal ``a`` and ``b`` (at most :data:`MAX_HOLD`
iterations, the loop a statement of the enclosing loop's body, itself no barrier, collective, ``asm``, ``break``,
``continue``, ``return`` or ``goto``, no ``#pragma`` but ``unroll`` above it), whose every access of a spec ``in``
buffer ``x`` (read only, no alias, never written anywhere) is at one index ``E`` that is free of calls, assignments
and subscripts, reads ``j``, and reads no name the enclosing loop writes or declares; the access itself not under
a condition inside the inner loop. The enclosing loop holds no ``break``, ``continue``, ``return`` or ``goto``
(every iteration reaches the inner loop), and its first test is free of calls and assignments (it is evaluated once
more, to skip the reads where the loop does not run). At most :data:`MAX_HOLD` elements held before one loop, fewer
where the block is large (:func:`_budget`: a quarter of the registers a thread of it may have).
"""
from __future__ import annotations

import re

from . import syntax as sx
from .base import LOAD_FUNCS, Unit
from .syntax import Node

MAX_HOLD = 64  # registers a thread may spend on held elements before one loop
REGISTER_FILE = 65536  # 32-bit registers of an SM (sm_70 to sm_100): a block of B threads gets at most 65536 / B each
_FLOW = ("break_statement", "continue_statement", "return_statement", "goto_statement", "gnu_asm_expression", "asm_statement")
_CONDITIONAL = ("if_statement", "conditional_expression", "switch_statement", "for_statement", "while_statement",
                "do_statement")
_LOOPS = ("for_statement", "while_statement", "do_statement")
_EFFECTS = ("call_expression", "assignment_expression", "update_expression")


def _pure(node: Node | None) -> bool:
    """No call, assignment or increment in ``node``."""
    return node is None or not sx.contains_type(node, _EFFECTS)


class HoistPass:
    """Elements a thread reads in every iteration of a loop -> registers filled once before it (module docstring)."""

    name = "hoist"
    group = None
    exact = True

    def applies(self, unit: Unit) -> bool:
        return unit.body is not None and bool(self._plans(unit))

    def apply(self, unit: Unit) -> Unit:
        edits: list[tuple[int, int, bytes]] = []
        fresh = 0
        for outer, holds in self._plans(unit):
            indent, _ = sx.line_indent(unit.data, outer.start_byte)
            pad = indent.decode()
            decls, fills = [], []
            for inner, (trips, start, j, header), name, base, index, accesses in holds:
                while re.search(rf"\bptxf_hold{fresh}\b", unit.text):
                    fresh += 1
                var = f"ptxf_hold{fresh}"
                fresh += 1
                decls.append(f"{base} {var}[{trips}];  // (transform hoist: {name}[{sx.text(index)}] read once, before the loop)\n{pad}")
                fills.append(f"{pad}#pragma unroll\n{pad}{header} {{ {var}[{j} - ({start})] = {sx.text(accesses[0])}; }}")
                edits += [(a.start_byte, a.end_byte, f"{var}[{j} - ({start})]".encode()) for a in accesses]
                if sx.pragma_before(inner) is None:
                    edits.append((inner.start_byte, inner.start_byte, ("#pragma unroll\n" + sx.line_indent(unit.data, inner.start_byte)[0].decode()).encode()))
            fill, decls = "\n".join(fills), "".join(decls)
            guard = _first_test(outer)
            block = fill if guard is None else f"{pad}{{ {guard[0]}if ({guard[1]}) {{\n{fill}\n{pad}}} }}"
            at = sx.pragma_before(outer) or outer
            edits.append((at.start_byte, at.start_byte, (decls + block.lstrip() + "\n" + pad).encode()))
        return unit.with_text(sx.apply_edits(unit.data, edits))

    def _plans(self, unit: Unit) -> list[tuple[Node, list[tuple[Node, tuple, str, str, Node, list[Node]]]]]:
        """``(enclosing loop, [(inner loop, its :func:`_header`, buffer, element type, index E, its accesses)])`` for
        each loop with something to hold, in text order."""
        params = unit.pointers
        roles = {a.name: a.role for a in unit.spec.args if a.is_buffer}
        budget = _budget(unit)
        held: dict[int, tuple[Node, list]] = {}
        for inner in sx.walk(unit.body):
            header = _header(inner) if inner.type == "for_statement" else None
            if header is None:
                continue
            outer = _enclosing(inner)  # (its check covers the inner loop too: no break, barrier... in either)
            if outer is None or not _safe_outer(outer) or _first_test(outer) is False:
                continue
            at = sx.pragma_before(outer) or outer
            if at.parent is None or at.parent.type != "compound_statement":
                continue  # (if (c) for ...: the registers' declaration and fill need a statement list around the loop)
            pragma = sx.pragma_before(inner)
            if pragma is not None and sx.text(pragma).split() != ["#pragma", "unroll"]:
                continue
            trips, _, j, _ = header
            changing = sx.written_names(outer) | sx.declared_names(outer)
            for name, p in params.items():
                if roles.get(name) != "in" or p.writes or p.other:
                    continue
                site = _site(inner, p, j, changing - {j})
                if site is None:
                    continue
                entry = held.setdefault(outer.start_byte, (outer, []))
                if sum(h[0] for _, h, *_ in entry[1]) + trips > budget:
                    continue
                base = re.sub(r"\b(const|volatile)\b\s*", "", p.base).strip()
                entry[1].append((inner, header, name, base, *site))
        return [v for v in held.values() if v[1]]


def _budget(unit: Unit) -> int:
    """Elements a thread may hold: MAX_HOLD, or a quarter of the registers a thread of the unit's block gets when the
    block is a literal of more than 256 threads (1024 threads: 64 registers each, 16 held: with half, 32, kmeans_assign's
    block-of-1024 chain spilled 180 bytes under launch_bounds); half of MAX_HOLD for a block that is an expression
    (chosen at launch)."""
    threads = 1
    for b in unit.launch.block:
        try:
            threads *= int(b)
        except (TypeError, ValueError):
            return MAX_HOLD // 2
    return min(MAX_HOLD, REGISTER_FILE // max(threads, 1) // 4)


def _header(loop: Node) -> tuple[int, str, str, str] | None:
    """``(trips, start, j, "for (int j = a; j < b; j++)")`` of a ``for`` whose index it declares, with literal bounds
    (1 to MAX_HOLD iterations) and an index the body never writes; else None."""
    trips = sx.literal_trips(loop)
    init = loop.child_by_field_name("initializer")
    if trips is None or not 1 <= trips <= MAX_HOLD or init is None or init.type != "declaration":
        return None
    decl = next((c for c in sx.walk(init) if c.type == "init_declarator"), None)
    j = sx.text(sx.unparen(loop.child_by_field_name("condition")).child_by_field_name("left"))
    body = loop.child_by_field_name("body")
    if decl is None or body is None or j in sx.written_names(body):
        return None
    start = sx.text(decl.child_by_field_name("value"))
    header = sx.text(loop)[: body.start_byte - loop.start_byte].rstrip()
    return trips, start, j, header


def _enclosing(inner: Node) -> Node | None:
    """The loop whose body's statements include ``inner`` (directly, not under a condition), else None."""
    parent = inner.parent
    if parent is not None and parent.type == "compound_statement" and parent.parent is not None and parent.parent.type in _LOOPS:
        return parent.parent
    return None


def _safe_outer(outer: Node) -> bool:
    """Every iteration reaches its statements: no break, continue, return, goto in it (nor a barrier: the reads move)."""
    return not any(n.type in _FLOW or (n.type == "call_expression" and sx.UNSAFE_CALL.match(sx.call_name(n) or ""))
                   for n in sx.walk(outer))


def _first_test(outer: Node) -> tuple[str, str] | None | bool:
    """What decides whether ``outer`` runs at all: ``(declarations, condition)`` for a ``for``/``while`` (None for a
    ``do``, which always runs); False when it cannot be evaluated once more safely (calls or assignments in it)."""
    if outer.type == "do_statement":
        return None
    cond = outer.child_by_field_name("condition")
    if cond is None or not _pure(cond):
        return False
    init = outer.child_by_field_name("initializer") if outer.type == "for_statement" else None
    if init is not None and init.type != "declaration":
        return False  # (an assignment initializer would change a variable before the loop's own)
    if init is not None and not all(_pure(c.child_by_field_name("value")) for c in sx.walk(init) if c.type == "init_declarator"):
        return False
    cond_text = sx.text(sx.clause_value(cond) if cond.type == "condition_clause" else cond)
    return (sx.text(init) + " " if init is not None else "", cond_text)


def _site(inner: Node, p, j: str, changing: set[str]) -> tuple[Node, list[Node]] | None:
    """``(index E, the accesses)`` when every access of ``p`` in ``inner`` is at one index that reads ``j``, reads no
    name in ``changing``, is free of calls, assignments and subscripts, and is not under a condition in ``inner``."""
    accesses = [a for a in p.reads + p.loads if inner.start_byte <= a.start_byte and a.end_byte <= inner.end_byte]
    if not accesses:
        return None
    index, key = None, None
    for a in accesses:
        e = _index(a, p.name)
        if e is None:
            return None
        k = sx.compact(e)
        if key is None:
            index, key = e, k
            names = sx.identifiers(e)
            if j not in names or names & changing or sx.contains_type(e, _EFFECTS + ("subscript_expression",)):
                return None
        elif k != key:
            return None
        up = a.parent
        while up is not None and up != inner:
            if up.type in _CONDITIONAL or (up.type == "binary_expression" and sx.operator(up) in ("&&", "||")):
                return None
            up = up.parent
    return index, accesses


def _index(access: Node, name: str) -> Node | None:
    """E of ``name[E]`` or ``LOAD(name + E)`` (a load intrinsic); None for ``*name`` or another form."""
    if access.type == "subscript_expression":
        return sx.subscript_index(access)
    if access.type == "call_expression" and sx.call_name(access) in LOAD_FUNCS:
        arg = sx.unparen(sx.call_args(access)[0])
        if arg.type == "binary_expression" and sx.operator(arg) == "+" and sx.is_ident(arg.child_by_field_name("left"), name):
            return arg.child_by_field_name("right")
    return None
