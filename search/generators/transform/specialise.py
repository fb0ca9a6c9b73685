"""``specialise``: the kernel's body versioned on the small values its loop-bounding or dividing integer scalars take.

A naive kernel often takes what is a compile-time constant in practice as a runtime scalar: a pooling or
convolution window ``K``, a stencil radius, a number of heads. Its loops then have unknown trip counts, so the
compiler neither unrolls them nor keeps their loads in flight together: ``for (kh = 0; kh < K; kh++) for (kw = 0;
kw < K; kw++) v = max(v, x[...])`` waits for each load before it issues the next. What a kernel engineer does is
template the kernel on those values and dispatch on them; this pass does the same inside the kernel::

    if (K == 3) { ...the body, K read as ((int)3)... }
    else if (K == 2) { ...K read as ((int)2)... }
    else { ...the body as written... }

Which scalars: integer parameters (an integer C type, an integer scalar in the spec) read in a loop's header (a
``for``'s initializer, condition or step, a ``while``/``do``'s condition; not a grid-stride loop's) or as a divisor in a loop's body (the right side of ``/``,
``%``, ``/=``, ``%=``: a transposed convolution's ``(oh + pad - kh) % stride`` for each tap) or multiplies a loop's
counter in such a test (its dilation, ``(oh + pad - kh * dil) % stride``: ``modstep`` then steps the loop), directly or through
locals computed from such scalars and literals alone (``int taps = 2 * R + 1;``), whose value is a spec expression that evaluates to at most
:data:`MAX_VALUE` in magnitude at some bench size (small trip counts are the ones worth unrolling); one version
per distinct combination of their small values over the bench sizes (at most :data:`MAX_VERSIONS`; at a size where
a scalar is larger, that scalar stays a name in the version, and a size where all are larger runs the code as
written). Any other value runs
the code as written, so the kernel stays correct for every caller; the value replaces the name with the name's
own type (``((long long)3)``), so the arithmetic is the original's and results are bit-identical.

Refused (:meth:`SpecialisePass.refusal` says why): no such scalar; more combinations than MAX_VERSIONS; a scalar
written in the body (assigned, incremented, its address taken) or its name declared again inside it (a variable, a
parameter of a lambda, an enumerator); a scalar used other than as a plain read of its value (a reference, a lambda
capture, an asm operand, ``decltype``, an argument of a call other than a math builtin: each would bind to the name,
and a literal means something else there); labels and preprocessor directives but ``#pragma`` (each copy would repeat them); a body
that does not parse (a macro the parser cannot see through may hide a ``__shared__`` array or a write); a
``__shared__`` array declared anywhere but the body's top level, or one whose declaration reads a name or type
declared before it in the body (top-level ones are declared once, before the versions, so no copy allocates its
own); a body already specialised.
"""
from __future__ import annotations

from ptxfactory.protocol.expr import ExprError, evaluate

from . import syntax as sx
from .base import Unit
from .rowpar import Refused
from .syntax import Node

MAX_VALUE = 64  # a trip count worth unrolling fully; a longer loop gains little from knowing its length
MAX_VERSIONS = 4  # copies of the body besides the one as written
MARK = "ptxf: specialised"
INT_DTYPES = frozenset({"i8", "i32", "i64", "u8", "u32", "u64"})


class SpecialisePass:
    """The body versioned on the bench sizes' values of its small loop-bounding integer scalars (module docstring)."""

    name = "specialise"
    group = None
    exact = True

    def refusal(self, unit: Unit) -> str | None:
        """Why the pass leaves ``unit`` alone (None when it applies)."""
        try:
            _plan(unit)
        except Refused as e:
            return str(e)
        return None

    def applies(self, unit: Unit) -> bool:
        return self.refusal(unit) is None

    def apply(self, unit: Unit) -> Unit:
        names, versions, hoisted = _plan(unit)
        body, data = unit.body, unit.data
        hoisted_ids = {(n.start_byte, n.end_byte) for n in hoisted}

        def copy(values: dict[str, int] | None) -> str:
            def rep(n: Node) -> bytes | None:
                if (n.start_byte, n.end_byte) in hoisted_ids:
                    return b""
                if values is not None and n.type == "identifier" and sx.text(n) in values:
                    v = values[sx.text(n)]
                    return f"(({names[sx.text(n)]}){v})".encode()
                return None
            return sx.render(body, data, rep).decode()[1:-1]  # inside the braces

        indent, _ = sx.line_indent(data, body.start_byte)
        pad = indent.decode() + "    "
        listed = ", ".join(names)
        out = [f"{{\n{pad}// {MARK} to the bench sizes' {listed} (transform specialise); other values run the code as written"]
        out += [pad + sx.text(n) for n in hoisted]
        for i, combo in enumerate(versions):
            cond = " && ".join(f"{n} == {v}" for n, v in combo.items())
            out.append(f"{pad}{'if' if i == 0 else '} else if'} ({cond}) {{{copy(combo)}")
        out.append(f"{pad}}} else {{{copy(None)}")
        out.append(f"{pad}}}\n{indent.decode()}}}")
        return unit.with_text(sx.apply_edits(data, [(body.start_byte, body.end_byte, "\n".join(out).encode())]))


def _plan(unit: Unit) -> tuple[dict[str, str], list[dict[str, int]], list[Node]]:
    """``(scalars -> C type, versions (one dict of values each, bench order), top-level __shared__ declarations)``;
    raises :class:`Refused`."""
    body = unit.body
    if body is None:
        raise Refused("no kernel body")
    if MARK in unit.text:
        raise Refused("already specialised")
    params = _int_scalars(unit)
    small: dict[str, list[int]] = {}
    why = []
    for n in params:
        values = _bench_values(unit, n)
        if values is not None and min(abs(v) for v in values) <= MAX_VALUE:
            small[n] = values
        elif values is not None:
            why.append(f"{n} is at least {min(values, key=abs)} at every bench size (above {MAX_VALUE}: nothing to unroll)")
    names = {n: t for n, t in params.items() if n in _loop_bounding(body, set(small))}
    if not names:
        direct = _loop_bounding(body, set(params))
        raise Refused("no integer scalar bounds a loop or divides in one" if not direct else
                      "; ".join(w for w in why if w.split()[0] in direct) or f"{', '.join(sorted(direct))}: not an integer "
                      "at every bench size")
    written = sx.written_names(body) & set(names)
    if written:
        raise Refused(f"{', '.join(sorted(written))} written in the body")
    again = sx.declared_names(body) & set(names)
    if again:
        raise Refused(f"{', '.join(sorted(again))} declared again in the body")
    versions: list[dict[str, int]] = []
    for i in range(len(unit.spec.bench.sizes)):
        # a value above MAX_VALUE stays a name in its size's version (a size where every one is: the code as written)
        combo = {n: small[n][i] for n in names if abs(small[n][i]) <= MAX_VALUE}
        if combo and combo not in versions:
            versions.append(combo)
    if len(versions) > MAX_VERSIONS:
        raise Refused(f"{len(versions)} combinations of {', '.join(names)} at the bench sizes (at most {MAX_VERSIONS} versions)")
    for n in sx.walk(body):
        if n.type == "labeled_statement":
            raise Refused(f"a label at line {_line(n)} of the kernel (each version would define it again)")
        if n.type.startswith("preproc") and not _pragma(n):
            raise Refused(f"a preprocessor directive in the body at line {_line(n)} of the kernel (each version would repeat it)")
        if n.type == "ERROR" or n.is_missing:
            raise Refused(f"the body does not parse at line {_line(n)} of the kernel (a macro the parser cannot see through may hide "
                          "a __shared__ array or a write)")
        if n.type == "enumerator" and sx.text(n.child_by_field_name("name")) in names:
            raise Refused(f"{sx.text(n.child_by_field_name('name'))} declared again in the body (an enumerator)")
        if sx.is_ident(n) and sx.text(n) in names and not _plain_read(n):
            raise Refused(f"{sx.text(n)} at line {_line(n)} of the kernel is not a plain read of its value (a reference or capture "
                          "binds to it, an asm operand, decltype or a call that may take it by reference)")
    hoisted = [s for s in body.named_children if s.type == "declaration" and _is_shared(s)]
    nested = [n for n in sx.walk(body) if n.type == "declaration" and _is_shared(n) and n.parent != body]
    if nested:
        raise Refused(f"a __shared__ declaration inside a block at line {_line(nested[0])} of the kernel (each version would allocate its own)")
    for decl in hoisted:
        named = sx.declared_names(decl)
        earlier = [t for t in body.named_children if t.end_byte <= decl.start_byte]
        hidden = named & set().union(set(), *(sx.identifiers(t) for t in earlier))
        if hidden:  # (moved above them, the shared array would hide the global those statements read)
            raise Refused(f"the __shared__ declaration at line {_line(decl)} of the kernel declares {', '.join(sorted(hidden))}, "
                          "which statements before it read (hoisted, it would hide what they read)")
        before = _declared_before(body, decl)
        uses = {sx.text(m) for m in sx.walk(decl) if m.type in ("identifier", "type_identifier")} - sx.declared_names(decl)
        if uses & before:
            raise Refused(f"the __shared__ declaration at line {_line(decl)} of the kernel reads {', '.join(sorted(uses & before))}, "
                          "declared before it in the body (it cannot be declared before the versions)")
    return names, versions, hoisted


# where a name's value is read and nothing binds to the name itself: its replacement by a literal of its own type
# means the same (a reference, lambda capture, asm operand, decltype((K)) or forwarding call would not)
_READ_PARENTS = frozenset({"binary_expression", "unary_expression", "cast_expression", "sizeof_expression",
                           "subscript_argument_list", "condition_clause", "initializer_list", "template_argument_list",
                           "return_statement"})
# callees whose arguments are values (CUDA's math and integer builtins): any other call might bind a reference
_VALUE_CALLEES = sx.VALUE_FUNCS


def _plain_read(n: Node) -> bool:
    """``n`` (an identifier) is read as a value: an operand, a cast's or subscript's, the value of a declaration whose
    declarator is not a reference, the right side of an assignment, a math builtin's argument."""
    p = n.parent
    while p is not None and (p.type == "parenthesized_expression" or
                             (p.type == "conditional_expression" and n != p.child_by_field_name("condition"))):
        n, p = p, p.parent
    if p is None:
        return False
    if p.type in _READ_PARENTS:
        return p.type != "unary_expression" or sx.operator(p) in ("-", "+", "!", "~")
    if p.type == "init_declarator":
        return n == p.child_by_field_name("value") and p.child_by_field_name("declarator").type == "identifier" and \
            (p.parent is None or p.parent.child_by_field_name("type") is None or
             p.parent.child_by_field_name("type").type != "decltype")
    if p.type == "assignment_expression":
        return n == p.child_by_field_name("right")
    if p.type == "argument_list":
        return sx.call_name(p.parent) in _VALUE_CALLEES
    return False


def _declared_before(body: Node, stmt: Node) -> set[str]:
    """Names (variables, types, enumerators) the body's top-level statements before ``stmt`` declare."""
    out: set[str] = set()
    for s in body.named_children:
        if s == stmt:
            break
        out |= sx.declared_names(s)
        out |= {sx.text(m.child_by_field_name("name")) for m in sx.walk(s)
                if m.type in ("struct_specifier", "class_specifier", "union_specifier", "enum_specifier", "enumerator")
                and m.child_by_field_name("name") is not None}
        out |= {sx.text(m.child_by_field_name("declarator")) for m in sx.walk(s)
                if m.type in ("type_definition", "alias_declaration") and m.child_by_field_name("declarator") is not None}
        out |= {sx.text(m.child_by_field_name("name")) for m in sx.walk(s)
                if m.type == "alias_declaration" and m.child_by_field_name("name") is not None}
    return out


def _pragma(n: Node) -> bool:
    """``n`` is a ``#pragma`` line or a part of one (repeating it in each version means the same)."""
    while n is not None and n.type != "preproc_call":
        n = n.parent if n.type.startswith("preproc") else None
    return n is not None and sx.text(n).lstrip().startswith("#pragma")


def _line(n: Node) -> int:
    """``n``'s line in the kernel's definition (1: the line of its signature)."""
    return n.start_point[0] + 1


def _int_scalars(unit: Unit) -> dict[str, str]:
    """Integer scalar parameters (by value, an integer C type, an integer scalar of the spec) -> their C type."""
    decl = sx.function_declarator(unit.fn)
    roles = {a.name: a for a in unit.spec.args}
    out = {}
    for p in decl.child_by_field_name("parameters").named_children:
        d = p.child_by_field_name("declarator") if p.type == "parameter_declaration" else None
        if not sx.is_ident(d):
            continue
        ctype = sx.type_text(p.child_by_field_name("type"))
        arg = roles.get(sx.text(d))
        if ctype in sx.INT_TYPES and arg is not None and arg.role == "scalar" and arg.dtype.value in INT_DTYPES:
            out[sx.text(d)] = ctype
    return out


def _loop_bounding(body: Node, small: set[str]) -> set[str]:
    """The names of ``small`` a loop's header reads (not a grid-stride loop's) or an integer division in a loop's body
    divides by (``(oh + pad - kh) % stride``: a runtime divisor costs a call's worth of instructions each iteration,
    a literal one a shift or a multiply), directly or through locals declared or assigned from those names and literals alone (``int taps = 2 * R
    + 1;``; a local that also reads a row length bounds no short loop)."""
    header: set[str] = set()
    values = _initializers(body)
    for n in sx.walk(body):
        if n.type in ("for_statement", "while_statement", "do_statement") and (_grid_strided(n) or _literally_bounded(n)):
            continue
        fields = ("initializer", "condition", "update") if n.type == "for_statement" else \
            ("condition",) if n.type in ("while_statement", "do_statement") else ()
        for f in fields:
            part = n.child_by_field_name(f)
            if part is not None:
                header |= sx.identifiers(part)
        if n.type in ("binary_expression", "assignment_expression") and sx.operator(n) in ("/", "%", "/=", "%=") \
                and _in_short_loop(n):
            header |= sx.identifiers(n.child_by_field_name("right"))  # a divisor: a literal one is a shift or a multiply
            if sx.operator(n) == "%":  # a loop counter's coefficient in a divisibility test (a transposed convolution's
                header |= _counter_coefficients(n.child_by_field_name("left"), n, values)  # dilation: modstep steps by it)
    sources: dict[str, set[str]] = {}
    for n in sx.walk(body):
        target = value = None
        if n.type == "init_declarator":
            target, value = sx.innermost_identifier(n.child_by_field_name("declarator")), n.child_by_field_name("value")
        elif n.type == "assignment_expression":
            target, value = sx.unparen(n.child_by_field_name("left")), n.child_by_field_name("right")
        if sx.is_ident(target) and value is not None:
            sources.setdefault(sx.text(target), set()).update(sx.identifiers(value))
    derived: set[str] = set()  # locals computed from the small names and literals alone (to a fixed point)
    changed = True
    while changed:
        changed = False
        for name, reads in sources.items():
            if name not in derived and name not in small and reads <= small | derived:
                derived.add(name)
                changed = True
    out, todo = header & small, [n for n in header if n in derived]
    seen = set(todo)
    while todo:
        for m in sources[todo.pop()]:
            if m in small:
                out.add(m)
            elif m in derived and m not in seen:
                seen.add(m)
                todo.append(m)
    return out


def _initializers(body: Node) -> dict[str, Node | None]:
    """The locals of ``body`` by their initializers (a local declared twice: None)."""
    values: dict[str, Node | None] = {}
    for d in sx.walk(body):
        if d.type == "init_declarator" and sx.is_ident(d.child_by_field_name("declarator")):
            name = sx.text(d.child_by_field_name("declarator"))
            values[name] = None if name in values else d.child_by_field_name("value")
    return values


def _counter_coefficients(expr: Node | None, at: Node, values: dict[str, Node | None]) -> set[str]:
    """The names multiplied by the counter of a ``for`` loop enclosing ``at`` in ``expr`` (``kh * dilation``), or in the
    initializer of a local ``expr`` reads (``int t = oh + pad - kh * dil; ... t % stride``; ``values``: the body's
    :func:`_initializers`)."""
    counters, p = set(), at.parent
    while p is not None and p.type != "function_definition":
        init = p.child_by_field_name("initializer") if p.type == "for_statement" else None
        if init is not None and init.type == "declaration":
            counters |= {sx.text(sx.innermost_identifier(d)) for d in init.children_by_field_name("declarator")}
        p = p.parent
    exprs, seen = [expr] if expr is not None else [], set()
    for e in exprs:  # the test's dividend and, transitively, the initializers of the locals it reads (int t = o - k * dil)
        for n in sx.identifiers(e):
            if values.get(n) is not None and n not in seen:
                seen.add(n)
                exprs.append(values[n])
    out: set[str] = set()
    for m in (m for e in exprs for m in sx.walk(e)):
        if m.type == "binary_expression" and sx.operator(m) == "*":
            sides = [sx.unparen(m.child_by_field_name(f)) for f in ("left", "right")]
            for a, b in (sides, sides[::-1]):
                if sx.is_ident(a) and sx.text(a) in counters and sx.is_ident(b):
                    out.add(sx.text(b))
    return out


def _in_short_loop(n: Node) -> bool:
    """``n`` runs in the body of a loop other than a grid-stride one (once a thread costs little; each iteration
    counts)."""
    p = n.parent
    while p is not None and p.type != "function_definition":
        if p.type in ("for_statement", "while_statement", "do_statement") and not _grid_strided(p) and \
                n.start_byte >= (p.child_by_field_name("body") or p).start_byte:
            return True
        p = p.parent
    return False


def _literally_bounded(loop: Node) -> bool:
    """A ``for`` loop whose trip count a literal already bounds: ``for (T j = s; j < s + K && ...; ...)`` (a pass's tail
    loop, ``vectorize``'s ``i < ptxf_v0 + 4 && i < n``), or literal bounds; versions on the other bounds' names would
    unroll nothing."""
    if loop.type != "for_statement":
        return False
    if sx.literal_trips(loop) is not None:
        return True
    init, cond = loop.child_by_field_name("initializer"), loop.child_by_field_name("condition")
    ds = init.children_by_field_name("declarator") if init is not None and init.type == "declaration" else []
    if len(ds) != 1 or ds[0].type != "init_declarator" or cond is None:
        return False
    j, start = sx.text(ds[0].child_by_field_name("declarator")), ds[0].child_by_field_name("value")
    norm = lambda n: "".join(sx.text(sx.unparen(n)).split())  # noqa: E731
    for part in sx.operands(cond, "&&"):
        p = sx.unparen(part)
        if p is None or p.type != "binary_expression" or sx.operator(p) not in ("<", "<=") or not sx.is_ident(
                sx.unparen(p.child_by_field_name("left")), j):
            continue
        e = sx.unparen(p.child_by_field_name("right"))
        if e is not None and e.type == "binary_expression" and sx.operator(e) == "+" and sx.is_number(
                e.child_by_field_name("right")) and norm(e.child_by_field_name("left")) == norm(start):
            return True
    return False


def _grid_strided(loop: Node) -> bool:
    """A loop whose header reads ``gridDim`` (a grid-stride loop over elements: its trip count is the grid's, not small)."""
    parts = [loop.child_by_field_name(f) for f in ("initializer", "condition", "update")]
    return any(p is not None and any(sx.is_builtin(m, "gridDim", f) for m in sx.walk(p) for f in "xyz") for p in parts)


def _bench_values(unit: Unit, name: str) -> list[int] | None:
    """The scalar's value at each bench size (None when one is not an integer)."""
    arg = next(a for a in unit.spec.args if a.name == name)
    out = []
    for size in unit.spec.bench.sizes:
        try:
            v = evaluate(str(arg.value), size)
        except ExprError:
            return None
        if isinstance(v, float):
            if not v.is_integer():
                return None
            v = int(v)
        if not isinstance(v, int) or isinstance(v, bool):
            return None
        out.append(v)
    return out or None


def _is_shared(decl: Node) -> bool:
    return any(sx.text(c) == "__shared__" for c in sx.walk(decl) if c.type in ("attribute_specifier", "type_qualifier",
                                                                              "storage_class_specifier", "identifier"))
