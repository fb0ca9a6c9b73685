"""``fold``: the last loop of a one-thread-per-row kernel, a map over ``h`` (heads, channels, batches), onto the grid's y.

Pattern, in the row's code of :mod:`.rowpar`'s opening (one thread per row, a 1-D grid and block)::

    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    int half = D / 2;                         // declarations with pure initialisers (any number)
    for (int h = a; h < H; ++h) {             // the row's last statement; carries nothing across iterations
        body                                  // no break, continue, return or goto
    }

becomes::

    const int ptxf_y = blockIdx.y;  // the loop over h: its iterations over the grid's y (transform fold)
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    int half = D / 2;
    if ((int)(a + ptxf_y) < H) {
        const int h = (int)(a + ptxf_y);
        body
    }

with the launch's grid ``[g, max(1, H - a)]``: a thread per (row, h). The extent is the trip as the spec computes it,
so the bounds must be computed the same way in C: integer parameters (no local of the same name), literals, ``+ - *``. Each iteration's body ran on one thread after the
others; now each runs on its own, in parallel, so the row's work spreads over H times the threads and every SM works
where T rows alone were too few (a token's heads in RoPE, a sample's channels). The declarations before the loop run
once per (row, h) instead of once per row: they must be pure. Then :mod:`.rowpar` reads ``ptxf_y`` as a block-uniform
batch index (keeping the grid's y) and splits the body's own loop across lanes.

Exact: every (row, h) runs the same statements on the same values. The iterations must share no memory: no element
that one writes is read or written by another. That is :mod:`.collapse`'s proof (rowpar splitting the nest made one
loop: :class:`.affine.Nest` over both digits), so fold takes the nests collapse takes, and refuses the others.

Refused, with the reason: no rowpar opening, a grid or block that is not 1-D, ``blockIdx.y``/``gridDim.y`` already
read; a last statement that is not ``for (T h = a; h < b; ++h)`` (``<=`` too), or whose body has no loop (folding the
row's only loop would leave a thread per element, its neighbours a row apart); ``h`` written in the body; ``break``,
``continue``, ``return`` or ``goto`` in it; a variable written in the loop and declared outside it (an accumulation);
a bound that is impure or written in the loop; a statement before the loop in the row's code that is not a pure
declaration; iterations not proven to touch disjoint elements (collapse refuses the nest); bounds with a name that is
not an integer parameter (a local, a float), a division or a float literal; a y extent above the grid's limit (65535)
at a spec size; a kernel name ``ptxf_y`` is taken (the next free one is used).
"""
from __future__ import annotations

from ptxfactory.protocol import LaunchConfig
from ptxfactory.protocol.expr import ExprError, evaluate

from . import syntax as sx
from .base import Unit
from .collapse import JUMPS, CollapsePass, _declaration, _head, _impure
from .opening import paren
from .raster import FOLD_NOTE
from .rowpar import PlannedPass, Refused, _local_arrays, _row_guard, index_statement, pointer_roots, spec_expression, written_roots
from .syntax import Node

BATCH = "ptxf_y"
MAX_GRID_Y = 65535


class FoldPass(PlannedPass):
    """The row's last loop, a map, onto the grid's y: a thread per (row, iteration) (see the module docstring)."""

    name = "fold"
    group = "nest"  # an alternative to collapse for the same loop nest; chains are built without either too
    exact = True

    def __init__(self) -> None:
        self.collapse = CollapsePass()

    def _plan(self, unit: Unit) -> tuple[list[tuple[int, int, bytes]], LaunchConfig, str]:
        if unit.body is None:
            raise Refused("no kernel body")
        launch = unit.launch
        if unit.spec.launch.policy != "free":
            raise Refused('launch.policy is not "free": the grid may not change')
        if len(launch.grid) != 1 or len(launch.block) != 1:
            raise Refused("not a 1-D grid and block")
        if any(sx.is_builtin(n, v, f) for n in sx.walk(unit.fn) for v in ("blockIdx", "gridDim") for f in "yz"):
            raise Refused("the kernel already reads blockIdx.y/z or gridDim.y/z")
        g = _row_guard(unit)
        if g is None:
            raise Refused("not one thread per row (rowpar's opening: index = blockIdx.x * blockDim.x + threadIdx.x, "
                          "then a guard)")
        if not g.rest or g.rest[-1].type != "for_statement":
            raise Refused("the row's code does not end with a for loop")
        loop, before = g.rest[-1], g.rest[:-1]
        roots = pointer_roots(unit)
        buffers = written_roots(unit.body, roots, _local_arrays(unit.body))
        if buffers is None:
            raise Refused("a write whose buffer is unknown")
        for s in before:
            if s.type != "declaration":
                raise Refused(f"line {s.start_point[0] + 1}: a statement before the loop that is not a declaration "
                              "(it would run once per iteration)")
            _declaration(s, buffers, roots)
        head = _head(unit, loop)
        if head is None or not head.declared:
            raise Refused(f"line {loop.start_point[0] + 1}: not for (T h = a; h < b; ++h)")
        body = loop.child_by_field_name("body")
        h = head.name
        if h in sx.written_names(body):
            raise Refused(f"{h} is written in the loop's body")
        if sx.contains_type(body, JUMPS):
            raise Refused("break, continue, return or goto in the loop's body")
        if not any(n.type in sx.LOOPS for n in sx.walk(body)):
            # (a loop over a row's elements folded away leaves a thread per element, neighbours a row apart)
            raise Refused(f"the loop over {h} has no loop inside it for the lanes to split")
        carried = sx.written_names(loop) - sx.declared_names(loop)
        if carried:
            raise Refused(f"the loop carries {', '.join(sorted(carried))} across iterations")
        written = sx.written_names(loop)
        for b in (head.lo, head.hi):
            if sx.identifiers(b) & written:
                raise Refused(f"the bound {sx.text(b)!r} uses {', '.join(sorted(sx.identifiers(b) & written))}")
            why = _impure(b, buffers, roots)
            if why:
                raise Refused(f"the bound {sx.text(b)!r}: {why}")
        # the grid's y extent is the trip the spec computes, so it must be the trip C computes: integer parameters no
        # local declaration shadows, literals, + - * (no division: the spec's // floors where C truncates)
        local = sx.declared_names(unit.body)
        for b in (head.lo, head.hi):
            for n in sx.walk(b):
                if n.type == "identifier" and (sx.text(n) in local or unit.types.scalar.get(sx.text(n)) not in sx.INT_TYPES):
                    raise Refused(f"the bound {sx.text(b)!r}: {sx.text(n)} is not an integer parameter of the kernel")
                if (n.type == "binary_expression" and sx.operator(n) not in ("+", "-", "*")) or \
                        (n.type == "number_literal" and not isinstance(sx.literal_value(n), int)):
                    raise Refused(f"the bound {sx.text(b)!r} is not a sum of products of integers (its trip would be "
                                  "the grid's y extent)")
        # the iterations must not share memory (no element one writes is touched by another): collapse's proof, where
        # rowpar splits the nest made one loop (affine.Nest over both digits), holds for this nest
        try:
            proof = self.collapse._plan(unit)
        except Refused as e:
            raise Refused(f"the iterations over {h} are not proven to touch disjoint elements ({e})") from None
        if not any(start <= loop.start_byte < end for start, end, _ in proof):
            raise Refused(f"the iterations over {h} are not proven to touch disjoint elements (collapse takes another loop)")
        extent = spec_expression(unit, head.hi, head.lo, start_zero=sx.is_number(head.lo, 0))
        if extent is None:
            raise Refused(f"the loop's trip {sx.text(head.hi)} - {sx.text(head.lo)} is not a spec expression")
        if head.inclusive:
            extent = f"({extent}) + 1"
        for size in list(unit.spec.check.sizes) + list(unit.spec.bench.sizes):
            try:
                y = int(evaluate(extent, size))
            except (ExprError, ArithmeticError, ValueError, TypeError):
                raise Refused(f"the loop's trip {extent} does not evaluate at {size}") from None
            if y > MAX_GRID_Y:
                raise Refused(f"the loop's trip is {y} at {size}, above the grid's y limit of {MAX_GRID_Y}")
        data = unit.data
        first = index_statement(unit, g)
        ind = sx.line_indent(data, first.start_byte)[0].decode()
        taken = sx.identifiers(unit.fn)
        y = next(f"{BATCH}{k or ''}" for k in range(len(taken) + 1) if f"{BATCH}{k or ''}" not in taken)
        batch = f"const int {y} = blockIdx.y;  // the loop over {h}: its iterations over the grid's y (transform fold)\n{ind}"
        value = f"({head.ctype})({paren(head.lo)} + {y})"
        cond = f"{value} {'<=' if head.inclusive else '<'} {paren(head.hi)}"
        lind = sx.line_indent(data, loop.start_byte)[0].decode()
        inner = body.text.decode() if body.type == "compound_statement" else "{\n" + lind + "    " + body.text.decode() + "\n" + lind + "}"
        inner = inner[0] + f"\n{lind}    const {head.ctype} {h} = {value};" + inner[1:]
        edits = [(first.start_byte, first.start_byte, batch.encode()),
                 (loop.start_byte, loop.end_byte, f"if ({cond}) {inner}".encode())]
        grid = [launch.grid[0], f"max(1, {extent})"]
        trip = f"({sx.text(head.hi)}) - ({sx.text(head.lo)})" + (" + 1" if head.inclusive else "")  # as C, for raster
        return edits, LaunchConfig(grid=grid, block=list(launch.block), shared_mem=launch.shared_mem), trip

    def apply(self, unit: Unit) -> Unit:
        edits, launch, trip = self._plan(unit)
        return unit.with_text(sx.apply_edits(unit.data, edits), launch=launch, **{FOLD_NOTE: trip})
