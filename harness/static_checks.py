"""The static layer of verification: what can be refused before a candidate runs.

Source checks on the candidate's translation unit (comments stripped): mutable ``__device__``
globals (state that survives between launches), ``printf``, traps and exits, host-side stream,
graph, callback and memory calls, L2 access-policy tricks and clock reads (timing-dependent
behaviour); launch limits of the target at every check and bench size (a kernel compiled for thread
block clusters: at most sm_90's 16 blocks, past the portable 8 only with the opt-in the worker sets at load, and a
grid of whole clusters); resources that make
the launch impossible (registers x threads over the 64 K register file of an SM).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache

import tree_sitter as ts
import tree_sitter_cuda

from ptxfactory.protocol import Candidate, KernelSpec, Resources
from ptxfactory.protocol.expr import ExprError, evaluate

from .compile import compile_ptx
from .elf import is_elf, mutable_global_bytes

# sm_90 limits (CUDA C++ Programming Guide, "Technical Specifications per Compute Capability").
MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK_DIMS = (1024, 1024, 64)
MAX_GRID_DIMS = (2**31 - 1, 65535, 65535)
MAX_SHARED_PER_BLOCK = 227 * 1024
REGISTERS_PER_SM = 64 * 1024
PORTABLE_CLUSTER_BLOCKS = 8  # the portable cluster size
# The largest cluster sm_90 (H100, H200) runs: 16 blocks, non-portable, which the worker opts each such kernel into
# (CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED) when it loads it (harness.gpu_eval.LoadedKernel).
MAX_CLUSTER_BLOCKS = 16


@dataclass(frozen=True)
class StaticFinding:
    """Why a candidate is refused before it runs: ``check`` is ``static_source``, ``static_binary`` (its compiled
    code), ``static_launch`` or ``static_resources``."""

    check: str
    reason: str


_FORBIDDEN = (
    (r"\bprintf\s*\(", "calls printf (output side channel; slows the kernel and hides behaviour)"),
    (r"\b__trap\s*\(|\basm\b[^;]*\btrap\b|\bbrkpt\b", "traps (asm trap / __trap) instead of computing"),
    (r"\b(exit|abort)\s*\(", "calls exit/abort"),
    (r"\bcuda(Stream|Event|Graph|Launch|Memcpy|Memset|Malloc|Free|DeviceSynchronize|Host)\w*\s*\(",
     "calls the CUDA runtime (streams, events, graphs, launches, memory or host callbacks) from the candidate"),
    (r"\baccessPolicyWindow\b|cudaAccessProperty|\bPersisting\b", "changes the L2 access policy (persisting lines survive the flush)"),
    (r"%globaltimer|%clock64|%clock\b|\bclock64\s*\(|\bclock\s*\(", "reads a clock (behaviour that depends on timing)"),
    (r"\b__managed__\b", "uses managed memory globals"),
)


@lru_cache(maxsize=1)
def _parser() -> ts.Parser:
    return ts.Parser(ts.Language(tree_sitter_cuda.language()))


def strip_comments(source: str) -> str:
    """``source`` without ``//`` and ``/* */`` comments (string literals are kept)."""
    return re.sub(r"//[^\n]*|/\*.*?\*/", " ", source, flags=re.S)


def mutable_device_globals(source: str) -> list[str]:
    """Names of ``__device__`` variables at namespace scope that are not ``const``/``__constant__``."""
    tree = _parser().parse(source.encode())
    names = []
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        if node.type in ("translation_unit", "linkage_specification", "declaration_list", "namespace_definition"):
            stack.extend(node.children)
            continue
        if node.type != "declaration":
            continue
        kids = node.children
        if not any(c.type in ("__device__", "__managed__") for c in kids):
            continue
        if any(d.type == "function_declarator" for c in kids for d in _walk(c)):
            continue  # a function prototype, also one returning a pointer
        if any(c.type == "type_qualifier" and c.text in (b"const", b"__constant__", b"constexpr") for c in kids):
            continue
        for c in kids:
            if c.type in ("init_declarator", "array_declarator", "identifier", "pointer_declarator"):
                ident = c if c.type == "identifier" else next((d for d in _walk(c) if d.type == "identifier"), None)
                if ident is not None:
                    names.append(ident.text.decode())
    return names


def _walk(node: ts.Node):
    yield node
    for c in node.children:
        yield from _walk(c)


_WRAPPERS = ("translation_unit", "linkage_specification", "declaration_list", "namespace_definition",
             "preproc_if", "preproc_ifdef", "preproc_else", "preproc_elif", "preproc_elifdef")


def _declared_names(node: ts.Node) -> set[str]:
    """The names a namespace-scope item declares: a function's (``k``, ``ns::f``: ``f``), a macro's, a variable's,
    a struct's or typedef's; empty for items that declare nothing by name (``#include``, ``static_assert``)."""
    if node.type == "template_declaration":
        return set().union(*(_declared_names(c) for c in node.named_children if c.type != "template_parameter_list"))
    if node.type in ("preproc_def", "preproc_function_def"):
        name = node.child_by_field_name("name")
        return {name.text.decode()} if name is not None else set()
    if node.type in ("struct_specifier", "class_specifier", "union_specifier", "enum_specifier"):
        name = node.child_by_field_name("name")
        return {name.text.decode()} if name is not None else set()
    names = set()
    if node.type in ("function_definition", "declaration", "type_definition", "field_declaration"):
        targets = [c for c in node.children if c.type not in ("compound_statement", "field_declaration_list", "initializer_list")]
        for c in targets:
            if c.type in ("struct_specifier", "class_specifier", "union_specifier", "enum_specifier"):
                names |= _declared_names(c)
                continue
            if c == node.child_by_field_name("type"):
                continue
            for d in _walk(c):
                if d.type in ("parameter_list", "argument_list", "compound_statement", "template_argument_list", "initializer_list"):
                    break
                if d.type in ("identifier", "type_identifier", "field_identifier", "operator_name", "destructor_name"):
                    names.add(d.text.decode())
                    break
    return names


def _items(node: ts.Node):
    """Namespace-scope items in file order, looking inside ``extern "C" {}``, namespaces and ``#if`` blocks."""
    for c in node.children:
        if c.type in _WRAPPERS:
            yield from _items(c)
        elif c.is_named:
            yield c


def scoped_source(source: str, kernel_name: str) -> str:
    """``source`` with what the kernel ``kernel_name`` cannot reach blanked out (spaces; newlines and so line
    numbers kept): other kernels, host functions, device functions, variables, macros and types that nothing
    reachable names. Reachable: the kernel's definition, then every function, macro, variable or type whose
    name appears in reachable text (its callees, the macros it expands, the globals it touches, a kernel it
    launches), to a fixed point; items that declare no name (``#include``, ``static_assert``) and operator
    overloads stay. The whole
    source when no kernel of that name is defined."""
    data = source.encode()
    items = [(n, _declared_names(n)) for n in _items(_parser().parse(data).root_node)]
    kernel = [i for i, (n, names) in enumerate(items) if kernel_name in names
              and any(d.type == "__global__" for d in _walk(n) if d.type in ("__global__", "compound_statement"))]
    if not kernel:
        return source
    # what declares no name, and operators (called as ``a + b``, never by name), are always kept
    keep = {i for i, (_n, names) in enumerate(items) if not names or any(n.startswith("operator") for n in names)} | set(kernel)
    seen: set[str] = set()
    frontier = list(keep)
    while frontier:
        words = set()
        for i in frontier:
            node = items[i][0]
            words |= set(re.findall(r"[A-Za-z_]\w*", data[node.start_byte:node.end_byte].decode(errors="replace")))
        words -= seen
        seen |= words
        frontier = [i for i, (_n, names) in enumerate(items) if i not in keep and names & words]
        keep.update(frontier)
    out = bytearray(data)
    for i, (node, _names) in enumerate(items):
        if i not in keep:
            out[node.start_byte:node.end_byte] = re.sub(rb"[^\n]", b" ", data[node.start_byte:node.end_byte])
    return out.decode(errors="replace")


def unset_constants(source: str, kernel_name: str, source_name: str = "<source>") -> list[str]:
    """Warnings, one per ``__constant__`` variable without an initialiser that the kernel ``kernel_name`` reads
    (:func:`scoped_source`: itself or a function it calls): the host sets it (``cudaMemcpyToSymbol``), the spec cannot,
    so it is zero when the tool runs the kernel. Each names the file and line of the first read and the symbol, and
    the host's ``cudaMemcpyToSymbol`` where the file has one."""
    scoped = scoped_source(source, kernel_name)
    items = list(_items(_parser().parse(scoped.encode()).root_node))
    out = []
    for item in items:
        if item.type != "declaration" or not any(c.type == "type_qualifier" and c.text == b"__constant__" for c in item.children):
            continue
        for d in item.children_by_field_name("declarator"):
            if d.type == "init_declarator" and d.child_by_field_name("value") is not None:
                continue  # initialised in the source: the tool's module holds those values too
            ident = next((n for n in _walk(d) if n.type == "identifier"), None)
            if ident is None:
                continue
            name = ident.text.decode()
            reads = [n.start_point[0] + 1 for f in items if f.type in ("function_definition", "template_declaration")
                     for n in _walk(f) if n.type == "identifier" and n.text.decode() == name]
            if not reads:
                continue
            host = _symbol_copy(source, name)
            set_at = f" (the host sets it with cudaMemcpyToSymbol at {source_name}:{host})" if host else ""
            out.append(f"{source_name}:{min(reads)}: constant memory '{name}' is read by the kernel and not set by the spec: "
                       f"it is zero when the tool runs the kernel; pass it as an argument{set_at}")
    return out


def _symbol_copy(source: str, name: str) -> int | None:
    """The line of the first ``cudaMemcpyToSymbol(name, ...)`` (or its ``Async`` form) in ``source``, else None."""
    for n in _walk(_parser().parse(source.encode()).root_node):
        if n.type == "call_expression" and n.child_by_field_name("function").text in (b"cudaMemcpyToSymbol", b"cudaMemcpyToSymbolAsync"):
            args = n.child_by_field_name("arguments").named_children
            if args and args[0].text.decode() == name:
                return n.start_point[0] + 1
    return None


def check_source(candidate: Candidate) -> StaticFinding | None:
    """Source-level refusals for what the candidate's kernel can reach (:func:`scoped_source`: the kernel, the
    device functions it calls, the globals and macros it uses; not other kernels of the same file), or None."""
    code = strip_comments(scoped_source(candidate.source, candidate.kernel_name))
    globals_ = mutable_device_globals(code)
    if globals_:
        return StaticFinding("static_source", f"mutable __device__ global(s) {', '.join(globals_)}: state that survives between launches")
    for pattern, why in _FORBIDDEN:
        m = re.search(pattern, code)
        if m:
            line = code.count("\n", 0, m.start()) + 1
            return StaticFinding("static_source", f"line {line}: {why}")
    return None


_CLUSTER = re.compile(r"^\s*\.reqnctapercluster\s+(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?", re.M)


def cluster_dims(ptx: str) -> tuple[int, int, int] | None:
    """The thread block cluster a kernel's PTX is compiled for (``.reqnctapercluster X, Y, Z``: blocks per cluster
    along x, y, z), or None for a kernel without one. ``ptx``: one kernel's PTX (:func:`kernel_ptx`)."""
    m = _CLUSTER.search(ptx)
    return None if m is None else tuple(int(g or 1) for g in m.groups())  # type: ignore[return-value]


def check_launch(candidate: Candidate, spec: KernelSpec, resources: Resources | None,
                 cluster: tuple[int, int, int] | None = None) -> StaticFinding | None:
    """The candidate's launch at every check and bench size within sm_90 limits, or why not. ``cluster``: the
    blocks per cluster the kernel is compiled for (:func:`cluster_dims`), whose grid must be whole clusters."""
    launch = candidate.launch
    if cluster is not None and math.prod(cluster) > MAX_CLUSTER_BLOCKS:
        return StaticFinding("static_launch", f"a cluster of {math.prod(cluster)} blocks exceeds sm_90's {MAX_CLUSTER_BLOCKS} (non-portable)")
    for size in spec.check.sizes + spec.bench.sizes:
        try:
            grid = [int(evaluate(g, size)) for g in launch.grid]
            block = [int(evaluate(b, size)) for b in launch.block]
            smem = int(evaluate(launch.shared_mem, size))
        except ExprError as exc:
            return StaticFinding("static_launch", f"launch expression: {exc}")
        if len(grid) > 3 or len(block) > 3:
            return StaticFinding("static_launch", "grid and block have at most 3 dimensions")
        if min(grid + block) < 1:
            return StaticFinding("static_launch", f"grid {grid} / block {block} has a dimension < 1 at {size}")
        threads = math.prod(block)
        if threads > MAX_THREADS_PER_BLOCK or any(b > m for b, m in zip(block, MAX_BLOCK_DIMS)):
            return StaticFinding("static_launch", f"block {block} exceeds the {MAX_THREADS_PER_BLOCK}-thread limit at {size}")
        if any(g > m for g, m in zip(grid, MAX_GRID_DIMS)):
            return StaticFinding("static_launch", f"grid {grid} exceeds the grid limits at {size}")
        if cluster is not None and any(g % c for g, c in zip(grid + [1, 1], cluster)):
            return StaticFinding("static_launch", f"grid {grid} is not whole clusters of {list(cluster)} blocks at {size}")
        static_smem = resources.shared_bytes if resources else 0
        if smem + static_smem > MAX_SHARED_PER_BLOCK:
            return StaticFinding("static_launch", f"{smem + static_smem} B shared memory per block exceeds {MAX_SHARED_PER_BLOCK} B at {size}")
        if resources and resources.registers * threads > REGISTERS_PER_SM:
            return StaticFinding("static_resources", f"{resources.registers} registers x {threads} threads exceeds the 65536-register file: the launch cannot run")
    return None


_PTX_GLOBAL = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+)?\.global\s+(?:\.\w+\s+|\d+\s+)*([A-Za-z_$][\w$]*)", re.M)


def written_globals(ptx: str, code: str | None = None) -> list[str]:
    """``.global`` variables of a PTX module that are stored to, or whose address is taken (and so may be), in
    ``code`` (some of the module's functions, see :func:`kernel_ptx`; default: the whole module).

    ``constexpr``/``const`` namespace-scope values also become ``.global`` data, but their reads
    are folded or plain loads; a ``st``/``atom``/``red`` on one, or a ``mov``/``cvta`` of its
    address, is what persistent state looks like.
    """
    code = ptx if code is None else code
    out = []
    for name in _PTX_GLOBAL.findall(ptx):
        n = re.escape(name)
        if re.search(rf"\b(?:st|atom|red)\.[\w.]*\s*\[\s*{n}\b", code) or re.search(rf"\b(?:mov|cvta)[\w.]*\s+%\w+\s*,\s*{n}\b", code):
            out.append(name)
    return out


_PTX_FUNCTION = re.compile(r"^[ \t]*(?:\.(?:visible|weak|extern)\s+)*\.(entry|func)\s+(?:\([^)]*\)\s*)?([A-Za-z_$][\w$]*)", re.M)


def ptx_functions(ptx: str) -> dict[str, tuple[str, str]]:
    """A PTX module's functions: name -> (``entry`` or ``func``, its text from the header to the closing brace).
    A declaration without a body (``.extern .func f(...);``) is left out."""
    out: dict[str, tuple[str, str]] = {}
    for m in _PTX_FUNCTION.finditer(ptx):
        brace, semi = ptx.find("{", m.end()), ptx.find(";", m.end())
        if brace < 0 or 0 <= semi < brace:
            continue  # a prototype
        depth, i = 0, brace
        while i < len(ptx):
            if ptx[i] == "{":
                depth += 1
            elif ptx[i] == "}":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        out[m.group(2)] = (m.group(1), ptx[m.start():i + 1])
    return out


def kernel_ptx(ptx: str, kernel_name: str) -> str:
    """The PTX the kernel ``kernel_name`` runs: its entries (``kernel_name`` itself, or its C++ manglings in the
    global namespace, every instantiation of a template) and every function they call, transitively. The whole
    module when no entry matches."""
    funcs = ptx_functions(ptx)
    prefix = f"_Z{len(kernel_name)}{kernel_name}"
    todo = [n for n, (kind, _t) in funcs.items() if kind == "entry" and (n == kernel_name or n.startswith(prefix))]
    if not todo:
        return ptx
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += [w for w in set(re.findall(r"[A-Za-z_$][\w$]*", funcs[name][1])) if w in funcs and w not in seen]
    return "\n".join(text for n, (_k, text) in funcs.items() if n in seen)


# What the compiled code of the kernel under test (and its callees) may not do, however the source spelled it
# (inline asm, macros, token pasting): each a PTX pattern and the reason.
_PTX_FORBIDDEN = (
    (r"%clock(?:_hi|64)?\b|%globaltimer(?:_lo|_hi)?\b", "reads a clock (%clock, %clock_hi, %clock64 or %globaltimer): "
                                                      "behaviour that depends on timing"),
    (r"\bcall(?:\.uni)?\b[^;]*\b(?:malloc|free)\s*,", "allocates device memory (malloc/free): state that survives between launches"),
    (r"\bcall(?:\.uni)?\b[^;]*\bvprintf\s*,", "calls printf (output side channel)"),
    (r"^\s*(?:@!?%\w+\s+)?(?:trap|brkpt|exit)\s*;", "traps or exits (trap, brkpt or exit) instead of computing"),
)


def scan_ptx(code: str) -> str | None:
    """The first forbidden thing the PTX ``code`` does (see :data:`_PTX_FORBIDDEN`), as a reason; None when clean."""
    for pattern, why in _PTX_FORBIDDEN:
        if re.search(pattern, code, re.M):
            return why
    return None


def check_binary(candidate: Candidate, cubin: bytes | None, arch: str, ptx: str | None = None) -> StaticFinding | None:
    """The compiled code of the candidate's kernel and the functions it calls (:func:`kernel_ptx`; not other
    kernels of the file): clock and global-timer reads, device malloc/free, printf, trap/exit (``static_binary``),
    and writable device globals it writes (``static_source``), however the source spelled them.

    A scan that cannot run refuses the candidate (``static_binary``): it never passes by default. ``ptx``: the
    candidate's PTX where the caller has it already (else compiled here)."""
    if not cubin:
        return None
    try:
        ptx = ptx if ptx is not None else compile_ptx(candidate, arch)
        code = kernel_ptx(ptx, candidate.kernel_name)
        why = scan_ptx(code)
        if why:
            return StaticFinding("static_binary", f"compiled code {why}")
        if is_elf(cubin) and not mutable_global_bytes(cubin):  # a PTX image (driver JIT): the PTX scan below decides
            return None
    except Exception as exc:  # noqa: BLE001: any failure means the code was not scanned
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return StaticFinding("static_binary", f"its compiled code could not be scanned ({first[:200]}): a check that cannot run refuses")
    names = written_globals(ptx, code)
    if names:
        return StaticFinding("static_source", f"writes device global(s) {', '.join(names)}: state that survives between launches")
    return None


def static_check(candidate: Candidate, spec: KernelSpec, resources: Resources | None, cubin: bytes | None = None) -> StaticFinding | None:
    """All static checks in order (source, compiled globals, then launch and resources); the first finding, or None.
    The PTX is compiled once, here when the source may ask for a thread block cluster (read for the launch check)."""
    found = check_source(candidate)
    if found:
        return found
    ptx = None
    if re.search(r"cluster_dims|reqnctapercluster", candidate.source):
        try:
            ptx = compile_ptx(candidate, spec.arch)
        except Exception as exc:  # noqa: BLE001: a check that cannot run refuses
            return StaticFinding("static_launch", f"its cluster dimensions could not be read ({type(exc).__name__})")
    found = check_binary(candidate, cubin, spec.arch, ptx)
    if found:
        return found
    cluster = cluster_dims(kernel_ptx(ptx, candidate.kernel_name)) if ptx is not None else None
    return check_launch(candidate, spec, resources, cluster)
