"""The static layer of verification: what can be refused before a candidate runs.

Source checks on the candidate's translation unit (comments stripped): mutable ``__device__``
globals (state that survives between launches), ``printf``, traps and exits, host-side stream,
graph, callback and memory calls, L2 access-policy tricks and clock reads (timing-dependent
behaviour); launch limits of the target at every check and bench size; resources that make
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
from .elf import mutable_global_bytes

# sm_90 limits (CUDA C++ Programming Guide, "Technical Specifications per Compute Capability").
MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK_DIMS = (1024, 1024, 64)
MAX_GRID_DIMS = (2**31 - 1, 65535, 65535)
MAX_SHARED_PER_BLOCK = 227 * 1024
REGISTERS_PER_SM = 64 * 1024


@dataclass(frozen=True)
class StaticFinding:
    """Why a candidate is refused before it runs: ``check`` is ``static_source``, ``static_launch`` or ``static_resources``."""

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


def check_source(candidate: Candidate) -> StaticFinding | None:
    """Source-level refusals for a candidate's whole translation unit, or None."""
    code = strip_comments(candidate.source)
    globals_ = mutable_device_globals(code)
    if globals_:
        return StaticFinding("static_source", f"mutable __device__ global(s) {', '.join(globals_)}: state that survives between launches")
    for pattern, why in _FORBIDDEN:
        m = re.search(pattern, code)
        if m:
            line = code.count("\n", 0, m.start()) + 1
            return StaticFinding("static_source", f"line {line}: {why}")
    return None


def check_launch(candidate: Candidate, spec: KernelSpec, resources: Resources | None) -> StaticFinding | None:
    """The candidate's launch at every check and bench size within sm_90 limits, or why not."""
    launch = candidate.launch
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
        static_smem = resources.shared_bytes if resources else 0
        if smem + static_smem > MAX_SHARED_PER_BLOCK:
            return StaticFinding("static_launch", f"{smem + static_smem} B shared memory per block exceeds {MAX_SHARED_PER_BLOCK} B at {size}")
        if resources and resources.registers * threads > REGISTERS_PER_SM:
            return StaticFinding("static_resources", f"{resources.registers} registers x {threads} threads exceeds the 65536-register file: the launch cannot run")
    return None


_PTX_GLOBAL = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+)?\.global\s+(?:\.\w+\s+|\d+\s+)*([A-Za-z_$][\w$]*)", re.M)


def written_globals(ptx: str) -> list[str]:
    """``.global`` variables of a PTX module that are stored to, or whose address is taken (and so may be).

    ``constexpr``/``const`` namespace-scope values also become ``.global`` data, but their reads
    are folded or plain loads; a ``st``/``atom``/``red`` on one, or a ``mov``/``cvta`` of its
    address, is what persistent state looks like.
    """
    out = []
    for name in _PTX_GLOBAL.findall(ptx):
        n = re.escape(name)
        if re.search(rf"\b(?:st|atom|red)\.[\w.]*\s*\[\s*{n}\b", ptx) or re.search(rf"\b(?:mov|cvta)[\w.]*\s+%\w+\s*,\s*{n}\b", ptx):
            out.append(name)
    return out


def check_binary(candidate: Candidate, cubin: bytes | None, arch: str) -> StaticFinding | None:
    """Writable device globals in the compiled code, however the source spelled them (macros, const_cast, templates)."""
    if not cubin:
        return None
    try:
        if not mutable_global_bytes(cubin):
            return None
        ptx = compile_ptx(candidate, arch)
    except Exception:  # not an ELF cubin, or PTX generation failed: the source check stands alone
        return None
    names = written_globals(ptx)
    if names:
        return StaticFinding("static_source", f"writes device global(s) {', '.join(names)}: state that survives between launches")
    return None


def static_check(candidate: Candidate, spec: KernelSpec, resources: Resources | None, cubin: bytes | None = None) -> StaticFinding | None:
    """All static checks in order (source, compiled globals, then launch and resources); the first finding, or None."""
    return check_source(candidate) or check_binary(candidate, cubin, spec.arch) or check_launch(candidate, spec, resources)
