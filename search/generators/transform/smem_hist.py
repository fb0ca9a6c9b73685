"""``smem_hist``: a histogram's global atomics -> a shared-memory histogram per block, merged once per bin.

A naive histogram adds every element straight into global memory, at an address that depends on the
element::

    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&hist[bin(x[i])], 1);

When the spec gives ``hist`` a small bin count ``B`` (a 1-D buffer of ``B`` elements, ``B`` a literal or
a size symbol that also reaches the kernel as a scalar argument, ``B`` elements taking at most
:data:`MAX_BYTES` of shared memory at every listed size), the pass gives each block its own copy in
shared memory::

    __shared__ int ptxf_hist[B];        // a literal B; else extern __shared__, B elements in the launch's
    zero it (block-strided); __syncthreads();              // dynamic shared memory
    ... atomicAdd(&ptxf_hist[bin(x[i])], 1) ...           // the same atomics, on the block's copy
    __syncthreads(); each nonzero bin added to hist[b] once (block-strided)

Shared-memory atomics are served by the SM, and the global ones drop to at most ``B`` per block. It
pays when a block adds many elements per bin: the atomics sit in a loop (``grid_stride`` first: one wave
of blocks, each looping over many elements), or the block has at least :data:`MIN_ELEMENTS_PER_BIN`
times ``B`` threads. Integer counts stay exact (sums in any order); a floating-point ``hist`` is re-
associated, so it is refused under an exact spec (``rtol = atol = 0``) or ``check.deterministic = true``.

Refused besides: atomics whose addresses are all warp-uniform (a reduction: ``atomic_agg``); ``hist`` used by anything but ``atomicAdd`` statements whose return value is unused;
a kernel that already has dynamic shared memory (or ``launch.policy = "fixed"`` with a symbolic ``B``,
whose shared memory is part of the launch); a ``return`` other than top-level guards
(``if (c) return;``, turned around the rest so every thread reaches both barriers), ``goto`` or ``asm``.
"""
from __future__ import annotations

from dataclasses import dataclass

from ptxfactory.protocol import LaunchConfig
from ptxfactory.protocol.expr import ExprError, evaluate

from . import syntax as sx
from .atomic_agg import KINDS, atomic_address, return_guards, site_text, statement_of, uniform_names, warp_uniform, without_returns
from .base import Unit
from .rowpar import PlannedPass, Refused
from .syntax import Node

MAX_BYTES = 16384  # a block's copy of the histogram: small beside the 48 KiB a block may take without opting in
MIN_ELEMENTS_PER_BIN = 2  # without a loop, a block of fewer than this many threads per bin merges more than it saves
MARK = "(transform smem_hist)"
NAME = "ptxf_hist"
RANK = "(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z))"  # a thread's rank in its block
THREADS = "(blockDim.x * blockDim.y * blockDim.z)"


@dataclass
class HistPlan:
    """The rewrite: the histogram's pointer ``root`` and element type, its bin count (a literal or the scalar
    parameter holding it, and the spec expression for the launch), the atomics' calls, the guards to turn."""

    root: str
    ctype: str
    bins: str
    bins_expr: str
    static: bool
    calls: list[Node]
    guards: list[Node]


class SmemHistPass(PlannedPass):
    """A histogram's global atomics -> a per-block shared-memory histogram merged once per bin (module docstring)."""

    name = "smem_hist"
    group = None  # composes with grid_stride (after it: a wave of blocks, each looping over many elements)
    exact = False  # a floating-point histogram is re-associated (integer counts are exact)

    def _plan(self, unit: Unit) -> HistPlan:
        body = unit.body
        if body is None:
            raise Refused("no kernel body")
        if NAME in sx.identifiers(body):
            raise Refused("the kernel's histogram is already in shared memory")
        reasons = []
        for root, calls in self._candidates(unit).items():
            try:
                return self._plan_for(unit, root, calls)
            except Refused as e:
                reasons.append(f"{root!r}: {e}")
        raise Refused("; ".join(reasons) or "no atomicAdd into a buffer of the spec")

    def _candidates(self, unit: Unit) -> dict[str, list[Node]]:
        """Pointer parameters that are atomicAdd targets somewhere, with those calls, in order of appearance."""
        out: dict[str, list[Node]] = {}
        for n in sx.walk(unit.body):
            if sx.call_name(n) == "atomicAdd" and sx.call_args(n):
                parsed = atomic_address(sx.call_args(n)[0], unit)
                if parsed is not None:
                    out.setdefault(sx.text(parsed[0]), []).append(n)
        return out

    def _plan_for(self, unit: Unit, root: str, calls: list[Node]) -> HistPlan:
        arg = next((a for a in unit.spec.args if a.name == root), None)
        if arg is None or not arg.shape or len(arg.shape) != 1:
            raise Refused("not a 1-D buffer of the spec")
        ctype = " ".join(w for w in unit.pointers[root].base.split() if w not in ("const", "volatile"))
        kind = KINDS.get(ctype)
        if kind not in ("i32", "u32", "u64", "f32", "f64"):
            raise Refused(f"atomicAdd on {ctype!r} elements is not handled")
        check = unit.spec.check
        if kind in ("f32", "f64") and (check.rtol == 0 and check.atol == 0 or check.deterministic):
            raise Refused("a floating-point histogram would be re-associated, and the spec asks for exact results or "
                          "repeatable bits")
        bins, bins_expr, static = self._bins(unit, arg.shape[0], arg.dtype.itemsize)
        idents, uniform, varying = set(), uniform_names(unit, unit.body.end_byte), False
        for call in calls:
            if statement_of(call) is None:
                raise Refused(f"{site_text(call)}: its return value is used")
            root_node, index = atomic_address(sx.call_args(call)[0], unit)
            idents.add(root_node.id)
            varying = varying or not all(warp_uniform(t, uniform) for t in index)
        if not varying:
            raise Refused("every address is the same on all lanes of a warp: a reduction (atomic_agg's), not a histogram")
        if root in sx.declared_names(unit.body):
            raise Refused("declared again in the kernel")
        other = next((n for n in sx.walk(unit.body) if sx.is_ident(n, root) and n.id not in idents), None)
        if other is not None:
            raise Refused(f"also used outside its atomicAdd statements ({site_text(other.parent)})")
        if any(n.type == "storage_class_specifier" and sx.text(n) == "extern" for n in sx.walk(unit.body)):
            raise Refused("the kernel already declares dynamic shared memory")
        if str(unit.launch.shared_mem).strip() not in ("0", ""):
            raise Refused("the launch already has dynamic shared memory")
        if not static and unit.spec.launch.policy == "fixed":
            raise Refused("a bin count known only at launch needs dynamic shared memory: a new launch, and the policy is fixed")
        if not any(_in_loop(c, unit.body) for c in calls):
            self._pays_without_loop(unit, unit.block_threads(), bins_expr)
        guards = return_guards(unit.body, "a thread leaving early would miss the block's barriers")
        return HistPlan(root, ctype, bins, bins_expr, static, calls, guards)

    def _bins(self, unit: Unit, dim, itemsize: int) -> tuple[str, str, bool]:
        """``(C expression of the bin count, its spec expression, a literal?)``, checked against :data:`MAX_BYTES`."""
        text = str(dim).strip()
        static = text.isdigit()
        if static:
            bins = text
        else:
            bins = next((a.name for a in unit.spec.args if a.role == "scalar" and str(a.value).strip() == text
                         and a.name in sx.declared_names(sx.function_declarator(unit.fn))), None)
            if bins is None:
                raise Refused(f"the bin count {text} reaches the kernel as no scalar argument")
            if bins in sx.written_names(unit.body):
                raise Refused(f"the bin count's parameter {bins!r} is written in the kernel")
        for size in unit.spec.check.sizes + unit.spec.bench.sizes:
            try:
                n = int(evaluate(text, size))
            except ExprError as e:
                raise Refused(f"the bin count {text} cannot be evaluated at {size}: {e}") from None
            if n * itemsize > MAX_BYTES:
                raise Refused(f"{n} bins take {n * itemsize} bytes at {size}: more than {MAX_BYTES} of shared memory per block")
        return bins, text, static

    def _pays_without_loop(self, unit: Unit, threads: int | None, bins_expr: str) -> None:
        for size in unit.spec.check.sizes + unit.spec.bench.sizes:
            n = int(evaluate(bins_expr, size))
            if threads is None or threads < MIN_ELEMENTS_PER_BIN * n:
                raise Refused(f"a block of {threads or 'unknown'} threads adds fewer than {MIN_ELEMENTS_PER_BIN} elements "
                              f"per bin ({n} bins at {size}): merging would cost as much as it saves (grid_stride first)")

    # -- rewrite ------------------------------------------------------------------------------------------

    def apply(self, unit: Unit) -> Unit:
        plan = self._plan(unit)
        if plan.guards:
            unit = unit.with_text(without_returns(unit, plan.guards, MARK))
            plan = self._plan(unit)
        data, body = unit.data, unit.body
        stmts = sx.statements(body)
        indent = sx.line_indent(data, stmts[0].start_byte)[0].decode() if stmts else "    "
        t = plan.ctype
        if plan.static:
            decl = f"__shared__ {t} {NAME}[{plan.bins}];  // this block's copy of {plan.root} {MARK}"
        else:
            decl = f"extern __shared__ {t} {NAME}[];  // this block's copy of {plan.root}: {plan.bins} bins, the launch's dynamic shared memory {MARK}"
        head = [decl,
                f"for (unsigned ptxf_b = {RANK}; ptxf_b < (unsigned)({plan.bins}); ptxf_b += {THREADS}) {NAME}[ptxf_b] = ({t})0;",
                "__syncthreads();"]
        tail = ["{   // each of this block's nonzero bins into the global histogram, once " + MARK,
                "    __syncthreads();",
                f"    for (unsigned ptxf_b = {RANK}; ptxf_b < (unsigned)({plan.bins}); ptxf_b += {THREADS}) {{",
                f"        const {t} ptxf_c = {NAME}[ptxf_b];",
                f"        if (ptxf_c != ({t})0) atomicAdd(&{plan.root}[ptxf_b], ptxf_c);",
                "    }",
                "}"]
        edits = []
        for call in plan.calls:
            root, _ = atomic_address(sx.call_args(call)[0], unit)
            edits.append((root.start_byte, root.end_byte, NAME.encode()))
        open_brace = body.children[0].end_byte
        edits.append((open_brace, open_brace, ("\n" + "\n".join(indent + x for x in head)).encode()))
        close = body.children[-1].start_byte
        closing = sx.line_indent(data, close)[0].decode() if sx.line_indent(data, close)[1] else ""
        edits.append((len(data[:close].rstrip()), close, ("\n" + "\n".join(indent + x for x in tail) + "\n" + closing).encode()))
        launch = unit.launch
        if not plan.static:
            launch = LaunchConfig(grid=list(launch.grid), block=list(launch.block), shared_mem=f"({plan.bins_expr}) * {_itemsize(unit, plan.root)}")
        return unit.with_text(sx.apply_edits(data, edits), launch=launch)


def _itemsize(unit: Unit, root: str) -> int:
    return next(a.dtype.itemsize for a in unit.spec.args if a.name == root)


def _in_loop(node: Node, stop: Node) -> bool:
    n = node.parent
    while n is not None and n != stop:
        if n.type in sx.LOOPS:
            return True
        n = n.parent
    return False
