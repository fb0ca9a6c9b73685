"""Cache hints on global memory accesses: ``ldg``, ``ldg_na`` and ``stream`` (alternatives: group ``hint``).

- ``ldg``: reads ``p[i]`` / ``*p`` of read-only pointer parameters become ``__ldg(p + (i))``
  (``ld.global.nc``: the read-only data path);
- ``ldg_na``: the same reads through inline PTX ``ld.global.nc.L1::no_allocate`` (read-only path,
  no L1 line allocated: for data read once, so it does not evict what is reused);
- ``stream``: the reads through ``__ldcs`` (``ld.global.cs``, evict-first) and the stores
  ``q[i] = v;`` to write-only outputs through ``__stcs(q + (i), (T)(v))`` (``st.global.cs``).

A pointer is read-only when every use of it in the kernel is a read of ``p[i]`` / ``*p`` (see
``base.PointerParam``), directly or through local pointers into it read the same way (``const float* row = x + r * N;
row[j]``: :func:`.base.alias_reads`), and its spec role is ``in``; ``ldg_na`` and ``stream`` take only the inputs of the kernel's largest
size class (:func:`streamed`: a weight vector beside a matrix is re-read by every row, and keeps the plain path); an output is streamed when its role is ``out``,
it is never read, and every write is a plain ``q[i] = v;`` statement. Exact: the same values are
loaded and stored, only the cache policy differs (the verifier's buffers never overlap).

Where a hint changes nothing, ``why_not`` says why for the job's report, each buffer's reason in turn (``x is accessed
through a local pointer (line 4: const float* row = x + r * N;)``, ``w is smaller than the kernel's largest buffers and
outputs ...``); the hints are no restructuring passes (``restructures = False``): the plan's order stays theirs.
"""
from __future__ import annotations

from . import syntax as sx
from .base import PointerParam, Unit, alias_reads, other_use, use_site
from .syntax import Node

# __ldg/__ldcs/__stcs have overloads for these element types (sm_90, CUDA 12/13 headers).
HINT_TYPES = frozenset({
    "float", "double", "int", "unsigned", "unsigned int", "long long", "long long int", "unsigned long long",
    "unsigned long long int", "short", "unsigned short", "char", "signed char", "unsigned char", "int8_t", "uint8_t",
    "int32_t", "uint32_t", "int64_t", "uint64_t", "__half", "half", "__half2", "__nv_bfloat16", "nv_bfloat16",
    "__nv_bfloat162", "float2", "float4", "int2", "int4", "uint2", "uint4", "double2",
})

# ld.global.nc.L1::no_allocate per element type: (helper suffix, PTX type, register constraint, register C type, to T)
_NA = {
    "float": ("f32", "f32", "f", "float", "{}"),
    "double": ("f64", "f64", "d", "double", "{}"),
    "int": ("s32", "s32", "r", "int", "{}"), "int32_t": ("s32", "s32", "r", "int", "{}"),
    "unsigned": ("u32", "u32", "r", "unsigned", "{}"), "unsigned int": ("u32", "u32", "r", "unsigned", "{}"),
    "uint32_t": ("u32", "u32", "r", "unsigned", "{}"),
    "long long": ("s64", "s64", "l", "long long", "{}"), "int64_t": ("s64", "s64", "l", "long long", "{}"),
    "unsigned long long": ("u64", "u64", "l", "unsigned long long", "{}"),
    "__nv_bfloat16": ("bf16", "b16", "h", "unsigned short", "__ushort_as_bfloat16({})"),
    "nv_bfloat16": ("bf16", "b16", "h", "unsigned short", "__ushort_as_bfloat16({})"),
    "__half": ("f16", "b16", "h", "unsigned short", "__ushort_as_half({})"),
    "half": ("f16", "b16", "h", "unsigned short", "__ushort_as_half({})"),
}


# each no-allocate helper's suffix -> the element type it loads (the first of ``_NA``'s names for it: "s32" -> "int")
NA_ELEMENTS = {suffix: base for base, (suffix, *_) in reversed(list(_NA.items()))}


def na_helper(base: str) -> tuple[str, str]:
    """``(name, definition)`` of the no-allocate load helper for element type ``base`` (a key of ``_NA``)."""
    suffix, ptype, con, reg, conv = _NA[base]
    name = f"ptxf_ldna_{suffix}"
    body = (
        f"static __device__ __forceinline__ {base} {name}(const {base}* p)\n"
        f"{{  // ld.global.nc.L1::no_allocate: read-only path, no L1 allocation (data read once)\n"
        f"    {reg} v;\n"
        f"    asm(\"ld.global.nc.L1::no_allocate.{ptype} %0, [%1];\" : \"={con}\"(v) : \"l\"(p));\n"
        f"    return {conv.format('v')};\n"
        f"}}"
    )
    return name, body


def streamed(unit: Unit, name: str) -> bool:
    """Whether the spec's buffer ``name`` is data the kernel streams through at every bench size: of its largest size
    class (at least half the elements of its largest buffer), or at least as large as its largest output (one element
    an output element: a GRU cell's h beside gates three times its size). A smaller input (a weight vector beside a
    matrix, a per-channel table beside activations) is read again by many threads, and a read-once hint (no L1
    allocation, evict-first) would send every re-read back to L2 or memory. True where the spec cannot say."""
    arg = next((a for a in unit.spec.args if a.name == name and a.is_buffer), None)
    if arg is None:
        return True
    for size in unit.spec.bench.sizes:
        try:
            n = arg.numel(size)
            most = max(a.numel(size) for a in unit.spec.args if a.is_buffer)
            out = max((a.numel(size) for a in unit.spec.args if a.is_buffer and a.role in ("out", "inout")), default=0)
        except ValueError:  # (protocol.expr.ExprError: a shape the sizes do not define)
            return True
        if 2 * n < most and n < out:
            return False
    return True


class _HintPass:
    name = ""
    group = "hint"
    exact = True
    restructures = False  # it says why_not for the report; the plan's order is the hints' own
    load = ""  # function called on the pointer
    streams_stores = False
    read_once = False  # a hint for data read once: only the buffers of the largest size class (:func:`streamed`)

    def _reads(self, unit: Unit, p: PointerParam) -> list[Node] | str:
        """``p``'s reads at an index, its local pointers' included (:func:`.base.alias_reads`), or why not."""
        if not p.other:
            return list(p.reads)
        through = alias_reads(unit, p)
        return through if isinstance(through, str) else list(p.reads) + through

    def _load_refusal(self, unit: Unit, p: PointerParam) -> str | None:
        """Why the reads of input ``p`` (spec role ``in``) take no hint, None when they do."""
        if p.writes:
            return f"{p.name} is written ({use_site(p.writes[0])})"
        reads = self._reads(unit, p)
        if isinstance(reads, str):
            return reads
        if not reads:
            return f"{p.name} is already read through {sx.call_name(p.loads[0])}" if p.loads else f"{p.name} is never used"
        if not self._supported(p.base):
            return f"{p.name}'s element type {p.base} has no {self.name} load"
        if self.read_once and not streamed(unit, p.name):
            return (f"{p.name} is smaller than the kernel's largest buffers and outputs: read again by many threads, it "
                    "keeps the cached path")
        return None

    def _loads(self, unit: Unit) -> list[PointerParam]:
        return [p for p in unit.pointers.values() if unit.arg_role(p.name) == "in" and self._load_refusal(unit, p) is None]

    def _store_refusal(self, p: PointerParam) -> str | None:
        """Why the stores to output ``p`` (spec role ``out``) are not streamed, None when they are."""
        if p.reads or p.loads:
            return f"{p.name} is read too ({use_site((p.reads + p.loads)[0])})"
        if p.other:
            return f"{p.name} is {other_use(p.other[0])}"
        if not p.writes:
            return f"{p.name} is never written"
        if p.base not in HINT_TYPES:
            return f"{p.name}'s element type {p.base} has no __stcs store"
        odd = next((w for w in p.writes if not _plain_store(w)), None)
        if odd is not None and odd.type == "call_expression":
            return f"{p.name} is already stored through {sx.call_name(odd)}"
        return f"{use_site(odd)} is not a plain {p.name}[i] = v; statement" if odd is not None else None

    def _stores(self, unit: Unit) -> list[PointerParam]:
        if not self.streams_stores:
            return []
        return [p for p in unit.pointers.values() if unit.arg_role(p.name) == "out" and self._store_refusal(p) is None]

    def _supported(self, base: str) -> bool:
        return base in HINT_TYPES

    def _load_fn(self, p: PointerParam) -> str:
        return self.load

    def why_not(self, unit: Unit) -> str | None:
        """Why the pass changes nothing in ``unit`` (None when it applies): each input's reason (written, read through
        a local pointer, of the smaller size class, ...), and with ``stream`` each output's."""
        if unit.body is None:
            return "no kernel body to read (the text does not parse as a kernel, or a macro could not be expanded)"
        if self.applies(unit):
            return None
        used = [p for p in unit.pointers.values() if p.reads or p.loads or p.writes or p.other]
        reasons = [self._load_refusal(unit, p) for p in used if unit.arg_role(p.name) == "in"]
        if self.streams_stores:
            reasons += [self._store_refusal(p) for p in used if unit.arg_role(p.name) == "out"]
        if not reasons:
            kinds = "no input (role in) or output (role out) buffer" if self.streams_stores else "no input buffer (role in)"
            return f"{kinds} among the pointer parameters the kernel uses"
        return "; ".join(r for r in reasons if r)

    def applies(self, unit: Unit) -> bool:
        return unit.body is not None and bool(self._loads(unit) or self._stores(unit))

    def apply(self, unit: Unit) -> Unit:
        loads = {p.name: p for p in self._loads(unit)}
        stores = {p.name: p for p in self._stores(unit)}
        data = unit.data
        read_nodes = {(n.start_byte, n.end_byte): loads[name] for name in loads for n in self._reads(unit, loads[name])}
        store_nodes = {(n.start_byte, n.end_byte): stores[name] for name in stores for n in stores[name].writes}

        def rewrite(node: Node) -> bytes | None:
            span = (node.start_byte, node.end_byte)
            if node.type == "assignment_expression":
                left = sx.unparen(node.child_by_field_name("left"))
                p = store_nodes.get((left.start_byte, left.end_byte))
                if p is not None:
                    addr = _address(left, data, rewrite)
                    value = sx.render(node.child_by_field_name("right"), data, rewrite)
                    return b"__stcs(" + addr + b", (" + p.base.encode() + b")(" + value + b"))"
            p = read_nodes.get(span)
            if p is not None and node.type in ("subscript_expression", "pointer_expression"):
                return self._load_fn(p).encode() + b"(" + _address(node, data, rewrite) + b")"
            return None

        new = sx.render(unit.fn, data, rewrite)
        new = data[: unit.fn.start_byte] + new + data[unit.fn.end_byte :]
        helpers = [na_helper(p.base) for p in loads.values()] if isinstance(self, LdgNoAllocatePass) else []
        return unit.with_text(new, helpers=helpers)


def _address(access: Node, data: bytes, rewrite) -> bytes:
    """``p + (i)`` for ``p[i]``, ``p`` for ``*p`` (nested accesses in ``i`` rewritten too)."""
    if access.type == "pointer_expression":
        return sx.render(access.child_by_field_name("argument"), data, rewrite)
    arg = sx.text(access.child_by_field_name("argument")).encode()
    idx = [c for c in access.child_by_field_name("indices").named_children if c.type != "comment"][0]
    offset = sx.render(idx, data, rewrite)
    simple = idx.type in ("identifier", "number_literal", "parenthesized_expression", "field_expression", "call_expression")
    return arg + b" + " + (offset if simple else b"(" + offset + b")")


def _plain_store(access: Node) -> bool:
    """``q[i] = v;`` as a whole statement (a store whose value nobody uses)."""
    if access.type != "subscript_expression":
        return False
    assign = access.parent
    return (
        assign is not None and assign.type == "assignment_expression" and sx.operator(assign) == "="
        and assign.child_by_field_name("left") == access and assign.parent is not None
        and assign.parent.type == "expression_statement"
    )


class LdgPass(_HintPass):
    """Reads of read-only pointer parameters through ``__ldg`` (``ld.global.nc``)."""

    name = "ldg"
    load = "__ldg"


class LdgNoAllocatePass(_HintPass):
    """Reads of read-only pointer parameters through inline PTX ``ld.global.nc.L1::no_allocate``."""

    name = "ldg_na"
    read_once = True

    def _supported(self, base: str) -> bool:
        return base in _NA

    def _load_fn(self, p: PointerParam) -> str:
        return na_helper(p.base)[0]


class StreamPass(_HintPass):
    """Evict-first ``__ldcs`` reads of read-only inputs and ``__stcs`` stores to write-only outputs (``.cs``)."""

    name = "stream"
    load = "__ldcs"
    streams_stores = True
    read_once = True
