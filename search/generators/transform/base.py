"""What a transform pass works on (:class:`Unit`), the pass interface (:class:`Pass`), and pointer-use analysis.

A :class:`Unit` is one ``__global__`` definition's text (with its ``extern "C"`` when it has one),
the launch it runs with, the spec, and the ``ptxf_`` helper definitions the passes so far need. A
pass reads the unit's syntax tree, decides whether its precondition holds (``applies``) and returns
a new unit (``apply``): new kernel text, and a new launch for the passes that change it.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Protocol

from ptxfactory.protocol import KernelSpec, LaunchConfig

from . import syntax as sx
from .syntax import Node

# Functions that only read through their pointer argument, and those that only write through it.
LOAD_FUNCS = frozenset({"__ldg", "__ldcs", "__ldcg", "__ldca", "__ldlu", "__ldcv"}) | {
    f"ptxf_ldna_{t}" for t in ("f32", "f64", "bf16", "f16", "s32", "u32", "s64", "u64")
}
STORE_FUNCS = frozenset({"__stcs", "__stcg", "__stwb", "__stwt"})
# ``Unit.notes`` key: why a macro invoked in the kernel could not be expanded (expand.py); the unit then has no body.
OPAQUE_NOTE = "opaque_macros"
# the unit note: a kernel template's parameters the spec fixes to one value (tune.template = { T = ["float"] }), so that
# a ``const T* x`` parameter's elements are known (``float``) to the passes that read or write them by type
TEMPLATE_NOTE = "template_types"
# the unit note: the names the file defines or declares as functions or macros (a ``__device__ int min(int, int)`` of
# its own): a pass that reads a call by its name as CUDA's own (``min``, ``max``) leaves such a name alone
FUNCTIONS_NOTE = "file_functions"
# the unit note: the file's functions whose calls are block-level (:func:`.syntax.block_level_functions`: they read the
# thread's index or wait at a barrier): a pass that changes which threads exist cannot see into them
BLOCK_FUNCTIONS_NOTE = "block_level_functions"


@dataclass(frozen=True)
class Unit:
    """A kernel definition under transformation.

    ``text``: the definition (``extern "C" __global__ void k(...) {...}``), no helpers (the file's function-like
    macros and one-line ``__device__`` helpers expanded in it: expand.py);
    ``launch``: grid/block/shared memory as spec expressions; ``c_linkage``: the kernel has C linkage
    (so adding ``const`` to a pointee type keeps its symbol); ``helpers``: ``(name, definition)``
    pairs of the ``static __device__ ptxf_*`` functions the text now calls, in first-use order.
    """

    text: str
    launch: LaunchConfig
    spec: KernelSpec
    c_linkage: bool
    helpers: tuple[tuple[str, str], ...] = ()
    notes: dict = field(default_factory=dict, compare=False)

    @cached_property
    def data(self) -> bytes:
        return self.text.encode()

    @cached_property
    def fn(self) -> Node | None:
        """The ``function_definition`` node of the kernel (None when the text does not parse as one)."""
        return sx.kernel_function(sx.parse(self.data).root_node)

    @cached_property
    def body(self) -> Node | None:
        """The kernel's body; None when the text does not parse as a kernel, or when it invokes a macro of the file
        that could not be expanded (``notes["opaque_macros"]``: what it reads and writes is unseen, so no pass that
        reasons about the body's accesses may apply)."""
        if self.fn is None or self.notes.get(OPAQUE_NOTE):
            return None
        return self.fn.child_by_field_name("body")

    @cached_property
    def renamed_apart(self) -> "Unit":
        """This unit with each local declared more than once renamed apart (``unique_names.py``: ``for (int d ...)``
        twice becomes ``d`` and ``d_2``), or itself where none is: what a pass that reads locals by name
        (``unique_names = True``) is given."""
        from .unique_names import unique_locals

        if self.body is None:
            return self
        data = unique_locals(self.data, self.fn)
        return self if data == self.data else self.with_text(data)

    @cached_property
    def types(self) -> sx.Types:
        return sx.Types(self.fn, self.notes.get(TEMPLATE_NOTE))

    @cached_property
    def pointers(self) -> dict[str, "PointerParam"]:
        """Single-level pointer parameters by name, with how the body uses them."""
        return pointer_params(self)

    def with_text(self, data: bytes, *, launch: LaunchConfig | None = None, helpers=(), **notes) -> "Unit":
        """A new unit with ``data`` as its text (plus new helpers, a new launch, notes merged)."""
        known, more = {n for n, _ in self.helpers}, []
        for h in helpers:
            if h[0] not in known:
                known.add(h[0])
                more.append(h)
        return replace(self, text=data.decode(), launch=launch or self.launch, helpers=self.helpers + tuple(more),
                       notes={**self.notes, **notes})

    def block_threads(self) -> int | None:
        """Threads per block when the launch's block is all integer literals, else None."""
        n = 1
        for b in self.launch.block:
            v = int_literal(b)
            if v is None:
                return None
            n *= v
        return n

    def block_is_1d(self) -> bool:
        return all(int_literal(b) == 1 for b in self.launch.block[1:])

    def arg_role(self, name: str) -> str | None:
        return next((a.role for a in self.spec.args if a.name == name), None)


class Pass(Protocol):
    """A semantics-preserving source transformation.

    ``name``: the registry-style name recorded in a candidate's params (``pass:<name>``);
    ``group``: passes of one group are alternatives (never chained together), or None;
    ``exact``: True when the pass promises bit-identical outputs.

    A pass may also say ``why_not(unit) -> str | None``, why it leaves ``unit`` alone (the job's report lists it); one
    that does leads the plan as a restructuring pass unless it says ``restructures = False`` (``vectorize``, the hints).
    """

    name: str
    group: str | None
    exact: bool

    def applies(self, unit: Unit) -> bool:
        """The precondition: the pass would change the kernel and keep its results."""
        ...

    def apply(self, unit: Unit) -> Unit:
        """The transformed unit (call only when :meth:`applies` is True)."""
        ...


def int_literal(v) -> int | None:
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().isdigit():
        return int(v.strip())
    return None


@dataclass
class PointerParam:
    """One ``T* name`` parameter: its declaration nodes and every use of the name in the body.

    ``reads``: ``p[i]`` / ``*p`` nodes read as values; ``loads``: ``p`` passed to a load intrinsic;
    ``writes``: ``p[i]`` / ``*p`` assigned or updated, or ``p`` passed to a store intrinsic;
    ``other``: any other use (address taken, pointer arithmetic kept, passed to a function, shadowed).
    """

    name: str
    base: str
    is_const: bool
    has_restrict: bool
    decl: Node
    pointer_decl: Node
    qualifiers: list[str]
    reads: list[Node] = field(default_factory=list)
    loads: list[Node] = field(default_factory=list)
    writes: list[Node] = field(default_factory=list)
    other: list[Node] = field(default_factory=list)

    @property
    def read_only(self) -> bool:
        """Only read (values or load intrinsics), and read at least once."""
        return not self.writes and not self.other and bool(self.reads or self.loads)


def pointer_params(unit: Unit) -> dict[str, PointerParam]:
    """Classify every use of each single-level pointer parameter (see :class:`PointerParam`)."""
    fn = unit.fn
    if fn is None or unit.body is None:
        return {}
    decl = sx.function_declarator(fn)
    out: dict[str, PointerParam] = {}
    for p in decl.child_by_field_name("parameters").named_children:
        if p.type != "parameter_declaration":
            continue
        d = p.child_by_field_name("declarator")
        if d is None or d.type != "pointer_declarator":
            continue
        inner = d.child_by_field_name("declarator")
        if not sx.is_ident(inner):
            continue  # T** p, T* p[]: left alone
        quals = [sx.text(c) for c in p.children if c.type == "type_qualifier"]
        ptr_quals = [sx.text(c) for c in d.children if c.type == "type_qualifier"]
        base = sx.type_text(p.child_by_field_name("type"))
        base = unit.notes.get(TEMPLATE_NOTE, {}).get(base, base)  # const T* x with T fixed to float: float
        out[sx.text(inner)] = PointerParam(
            name=sx.text(inner), base=base, is_const="const" in quals,
            has_restrict=any(q in ("__restrict__", "__restrict", "restrict") for q in ptr_quals), decl=p, pointer_decl=d,
            qualifiers=quals,
        )
    shadowed = sx.declared_names(unit.body)
    for node in sx.walk(unit.body):
        if node.type != "identifier" or sx.text(node) not in out:
            continue
        pp = out[sx.text(node)]
        if pp.name in shadowed:
            pp.other.append(node)
            continue
        kind, access = classify_use(node)
        getattr(pp, kind).append(access)
    return out


def classify_use(ident: Node) -> tuple[str, Node]:
    """How one occurrence of a pointer name is used: ``("reads"|"writes"|"loads"|"other", node)``.

    The node is the access (``p[i]``, ``*p``) for reads and writes, the call for loads/stores.
    """
    parent = _up(ident)
    if parent is None:
        return "other", ident
    if parent.type == "subscript_expression" and parent.child_by_field_name("argument") == ident:
        return access_kind(parent), parent
    if parent.type == "pointer_expression" and sx.operator(parent) == "*":
        return access_kind(parent), parent
    # p or p + k (k an integer expression) as the pointer argument of an intrinsic
    arg = ident
    if parent.type == "binary_expression" and sx.operator(parent) == "+":
        arg, parent = parent, _up(parent)
    if parent is not None and parent.type == "argument_list":
        call = parent.parent
        first = sx.call_args(call)[:1]
        if first and sx.unparen(first[0]) == arg:
            name = sx.call_name(call)
            if name in LOAD_FUNCS:
                return "loads", call
            if name in STORE_FUNCS:
                return "writes", call
    return "other", ident


def access_kind(access: Node) -> str:
    """``"reads"`` when the value of ``p[i]`` / ``*p`` is only read, ``"writes"`` when it is assigned or updated, else ``"other"``."""
    child, parent = access, _up(access)
    while parent is not None and parent.type == "parenthesized_expression":
        child, parent = parent, _up(parent)
    if parent is None:
        return "reads"
    if parent.type == "assignment_expression" and parent.child_by_field_name("left") == child:
        return "writes"
    if parent.type == "update_expression":
        return "writes"
    if parent.type in ("pointer_expression", "field_expression") or (parent.type == "init_declarator" and _binds_reference(parent)):
        return "other"  # &p[i], p[i].x, T& r = p[i]
    return "reads"


def use_site(node: Node) -> str:
    """``line N: TEXT`` of the statement (or declaration) that holds ``node``, on one line, cut at 50 characters."""
    stmt = node
    while stmt.parent is not None and not stmt.type.endswith(("statement", "declaration")):
        stmt = stmt.parent
    t = " ".join(sx.text(stmt).split())
    return f"line {node.start_point[0] + 1}: {t if len(t) <= 50 else t[:47] + '...'}"


def other_use(ident: Node) -> str:
    """What a pointer's use that is no read or write at an index is (:func:`classify_use`'s ``other``): read
    through a local pointer (``const float* row = x + r * N;``), passed to a function, its address or an element's
    taken, or shadowed."""
    up = ident.parent
    while up is not None and up.type in ("binary_expression", "parenthesized_expression", "cast_expression"):
        up = up.parent
    where = use_site(ident)
    if up is not None and up.type in ("init_declarator", "assignment_expression"):
        return f"accessed through a local pointer ({where})"
    if up is not None and up.type == "argument_list":
        return f"passed to {sx.call_name(up.parent) or 'a function'} ({where})"
    return f"used otherwise than read or written at an index ({where})"


def alias_reads(unit: "Unit", p: PointerParam) -> list[Node] | str:
    """The reads through the local pointers at ``p``'s other uses (``const float* row = x + r * N;`` then ``row[j]``):
    each such use must initialise a pointer declared once with ``p``'s element type (``p``, ``p + e``, ``e + p``),
    never assigned, incremented or otherwise used than read at an index; the reads, or why not (a reason naming ``p``)."""
    counts = sx.declaration_counts(unit.fn)
    written = sx.written_names(unit.body)
    out: list[Node] = []
    for use in p.other:
        up, child = use.parent, use
        while up is not None and up.type in ("parenthesized_expression",):
            child, up = up, up.parent
        if up is not None and up.type == "binary_expression" and sx.operator(up) == "+":
            child, up = up, up.parent
            while up is not None and up.type == "parenthesized_expression":
                child, up = up, up.parent
        decl = up.child_by_field_name("declarator") if up is not None and up.type == "init_declarator" else None
        if decl is None or decl.type != "pointer_declarator" or up.child_by_field_name("value") != child \
                or not sx.is_ident(decl.child_by_field_name("declarator")):
            return f"{p.name} is {other_use(use)}"
        name = sx.text(decl.child_by_field_name("declarator"))
        declaration = up.parent
        base = sx.type_text(declaration.child_by_field_name("type")) if declaration is not None else None
        if counts.get(name) != 1 or name in written or base != p.base:
            return f"{p.name} is {other_use(use)}"
        for n in sx.walk(unit.body):
            if n.type == "identifier" and sx.text(n) == name and n != decl.child_by_field_name("declarator"):
                kind, access = classify_use(n)
                if kind != "reads":
                    return f"{p.name} is read through the local pointer {name}, used otherwise ({use_site(n)})"
                out.append(access)
    return out


def _binds_reference(init: Node) -> bool:
    d = init.child_by_field_name("declarator")
    return d is not None and d.type == "reference_declarator"


def _up(node: Node) -> Node | None:
    return node.parent
