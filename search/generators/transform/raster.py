"""``raster``: the blocks of a folded loop's iterations run next to each other (a 2-D grid made 1-D, y varying fastest).

:mod:`.fold` puts the iterations of a row's last loop (a token's heads) on the grid's y. The GPU hands out blocks x
first: every row block of iteration 0, then every row block of iteration 1, ... so what the iterations of one row
share (RoPE's cos/sin row of a token, read by each of its heads) is read once per iteration from DRAM whenever it is
larger than L2 (131072 tokens of 64 pairs: 64 MiB of tables, read 8 times at 8 heads). In the kernel as written the
iterations of one row ran one after the other in one thread, sharing that data in cache; ``raster`` gives that
locality back to the folded kernel: one block index ``b`` over ``gx * gy`` blocks, taken apart as::

    const unsigned ptxf_by = blockIdx.x % E;  // E: the folded loop's trip, as fold computed it (C, integer parameters)
    const unsigned ptxf_bx = blockIdx.x / E;

with every ``blockIdx.x`` of the kernel read as ``ptxf_bx`` and ``blockIdx.y`` (fold's one read) as ``ptxf_by``, and
the launch's grid ``[gx * gy]``. Consecutive blocks are then one row block's iterations, in the order the original
thread ran them. Exact: every block runs the same statements on the same indices; only the order the GPU meets them
in changes (which CUDA never promises).

Applies after fold (the unit's ``fold_y`` note: the trip as C), once the other passes have chosen the launch (it runs
after rowpar and vector_loops, before launch_bounds). Left alone: a grid that is not 2-D, ``gridDim``, ``blockIdx.z``
read anywhere, ``blockIdx.y`` read other than fold's once, a total block count above 2^31 - 1 at a spec size.
"""
from __future__ import annotations

from ptxfactory.protocol import LaunchConfig
from ptxfactory.protocol.expr import ExprError, evaluate

from . import syntax as sx
from .base import Unit

FOLD_NOTE = "fold_y"  # Unit.notes: the folded loop's trip as a C expression of the kernel's integer parameters
MAX_GRID_X = 2**31 - 1


class RasterPass:
    """A folded kernel's 2-D grid as one x, the folded iterations of a row block in consecutive blocks (module docstring)."""

    name = "raster"
    group = None
    exact = True

    def applies(self, unit: Unit) -> bool:
        fn, extent = unit.fn, unit.notes.get(FOLD_NOTE)
        if fn is None or unit.body is None or not extent or len(unit.launch.grid) != 2:
            return False
        reads = [(sx.text(n.child_by_field_name("argument")), sx.text(n.child_by_field_name("field")))
                 for n in sx.walk(fn) if n.type == "field_expression"]
        if any(v == "gridDim" or (v == "blockIdx" and f == "z") for v, f in reads) or reads.count(("blockIdx", "y")) != 1:
            return False
        total = f"({unit.launch.grid[0]}) * ({unit.launch.grid[1]})"
        for size in list(unit.spec.check.sizes) + list(unit.spec.bench.sizes):
            try:
                if int(evaluate(total, size)) > MAX_GRID_X:
                    return False
            except (ExprError, ArithmeticError, ValueError, TypeError):
                return False
        return True

    def apply(self, unit: Unit) -> Unit:
        fn, data, extent = unit.fn, unit.data, unit.notes[FOLD_NOTE]
        taken = sx.identifiers(fn)
        bx, by = (next(f"ptxf_{a}{k or ''}" for k in range(len(taken) + 1) if f"ptxf_{a}{k or ''}" not in taken)
                  for a in ("bx", "by"))
        edits = []
        for n in sx.walk(fn):
            if n.type == "field_expression":
                if sx.is_builtin(n, "blockIdx", "x"):
                    edits.append((n.start_byte, n.end_byte, bx.encode()))
                elif sx.is_builtin(n, "blockIdx", "y"):
                    edits.append((n.start_byte, n.end_byte, by.encode()))
        body = unit.body
        ind = "    "
        first = next((c for c in body.children if c.type not in ("{", "comment")), None)
        if first is not None:
            ind = sx.line_indent(data, first.start_byte)[0].decode() or ind
        e = f"((int)({extent}) > 1 ? (unsigned)({extent}) : 1u)"
        head = (f"\n{ind}const unsigned {by} = blockIdx.x % {e};  // the folded iterations of a row block in consecutive "
                f"blocks (transform raster)\n{ind}const unsigned {bx} = blockIdx.x / {e};")
        edits.append((body.start_byte + 1, body.start_byte + 1, head.encode()))
        launch = unit.launch
        grid = [f"({launch.grid[0]}) * ({launch.grid[1]})"]
        return unit.with_text(sx.apply_edits(data, edits),
                              launch=LaunchConfig(grid=grid, block=list(launch.block), shared_mem=launch.shared_mem))
