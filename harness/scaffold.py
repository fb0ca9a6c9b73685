"""Scaffold a spec for a kernel that has none: ``ptxfactory init`` and the editor's "Create spec for NAME".

Everything is read from the CUDA source with tree-sitter-cuda (kernels found by :mod:`.source`):

- **roles**: a ``const T*`` is ``in``; a ``T*`` the body only writes (``p[i] = ...``) is ``out``, one it
  also reads (``p[i] += ...``, ``v = p[i]``, ``atomicAdd(p, ...)``, ``atomicAdd(&p[i], ...)``) is ``inout``, one it only reads
  is ``in``; a pointer the body passes on or aliases gets a TODO;
- **dtypes** from the C types (``float`` -> f32, ``__nv_bfloat16`` -> bf16, ``int`` -> i32, ``int64_t`` -> i64,
  a template type parameter -> the type it is instantiated with);
- **size symbols**: integer scalars named like sizes (``n``, ``N``, ``M``, ``rows``, ``cols``, ``len``,
  ``num_*``, ``*_size`` ...); other scalars get a placeholder value and a TODO;
- **launch** from the ``NAME<<<grid, block, shared>>>`` in the file nearest the kernel, its host variables
  followed back to their definitions (``int blocks = (n + 255) / 256``, ``dim3 block(256)``, ``block.x`` of a
  ``dim3``, ``#define``) and to the size symbols they are passed as (``k<<<...>>>(x, y, n)`` with parameter ``N``:
  ``n`` is ``N``); else one thread per element, 256 per block, with a TODO;
- **shapes** from the largest index each buffer's accesses reach (:mod:`.extents`: ``xin[m * 2 * H + H + j]`` with
  ``m < M``, ``j < H`` from the guards: ``[M, 2 * H]``; ``w[k]`` in ``for (k = 0; k < 5; ++k)``: ``[5]``; the file's
  integer ``#define D 64`` read as 64), and an integer input's values from the dimension they index
  (``row[labels[r]]``, row's ``V``: ``randint(0, V)``) or from the loop they start and bound (``for (j = offsets[s];
  j < offsets[s + 1]; ++j)``: ``offsets(0, 2 * L + 1)``, ``L`` a size of the spec's own);
- **warnings** for what the tool runs otherwise than the program: ``__constant__`` memory the kernel reads and the host
  sets (:func:`.static_checks.unset_constants`), zero under the tool.

What cannot be read (a shape, an index buffer's values, the sizes, the tolerances) gets a placeholder that loads
and a ``# TODO`` comment; the file's header says which keys are guesses (the kernel may run wrongly with them)
and claims the spec runs as written only where none is. Every scaffold is validated with
:func:`ptxfactory.protocol.spec.parse_spec` before it is returned.

:func:`plan_spec` says what to write (a new ``FILE.toml``, or tables appended to an existing one that
lacks them; an existing table is never touched); :func:`write_spec` writes it without ever overwriting.
"""
from __future__ import annotations

import json
import keyword
import math
import re
import textwrap
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import tree_sitter as ts
import tree_sitter_cuda

from ptxfactory.protocol.expr import ExprError, evaluate, symbols_in
from ptxfactory.protocol.spec import Dtype, SpecError, parse_spec, spec_path_for

from .cexpr import Poly, add, at_most, divide, maybe_written_names, mul, names, nonneg, poly, show, uncast
from .cmacros import integer_constants
from .extents import PURE_CALL, Access, Extent, Range, Ranges, accesses, bounded_loop, extent, indexed_extent
from .source import KernelDef, find_kernel, find_kernels
from .static_checks import unset_constants


class ScaffoldError(ValueError):
    """A spec cannot be scaffolded: no such kernel, the kernel already has a table, or the existing
    spec file is not TOML. The message says what to do."""


@dataclass(frozen=True)
class Scaffold:
    """One kernel's scaffolded tables.

    ``table``: TOML text of ``[kernel.NAME]`` and its ``check``/``bench`` (and ``tune``) tables;
    ``todos``: (line within ``table``, 1-based, message) of each TODO comment;
    ``launch_from``: ``"FILE:LINE"`` of the ``<<<...>>>`` the launch was read from, None when guessed;
    ``guesses``: the keys whose values are guesses the kernel may run wrongly with (``args.x.shape``, ``args.ids.init``,
    ``launch``), not placeholders to tune (sizes, tolerances); ``warnings``: what the spec cannot say and the user must
    know (``FILE:LINE: ...``), each also a comment of ``table``.
    """

    kernel: str
    table: str
    todos: tuple[tuple[int, str], ...]
    launch_from: str | None = None
    guesses: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class SpecAddition:
    """What :func:`write_spec` writes: ``text`` as a new file (``create``) or appended to the existing one.

    ``todos`` are (line in the file once written, 1-based, message); ``warnings`` the scaffolds' (:class:`Scaffold`).
    """

    path: Path
    text: str
    create: bool
    kernels: tuple[str, ...]
    todos: tuple[tuple[int, str], ...] = field(default=())
    warnings: tuple[str, ...] = field(default=())


# --- C types ------------------------------------------------------------------------------------------

_DTYPE_OF = {c: d for d in Dtype for c in d.c_types}
_DTYPE_OF.update({"long int": Dtype.i64, "signed long long": Dtype.i64, "unsigned int32_t": Dtype.u32})
# C types with no spec dtype of their own: the nearest one, with a TODO (the signature check will name them).
_NEAREST = {"ptrdiff_t": Dtype.i64, "short": Dtype.i32, "unsigned short": Dtype.u32, "bool": Dtype.u8,
            "float2": Dtype.f32, "float4": Dtype.f32, "__half2": Dtype.f16, "half2": Dtype.f16,
            "__nv_bfloat162": Dtype.bf16}
_SIZEOF = {c: d.itemsize for c, d in _DTYPE_OF.items()} | {"size_t": 8, "float2": 8, "float4": 16, "double2": 16,
                                                           "__half2": 4, "__nv_bfloat162": 4, "int4": 16, "int2": 8}
_INT_DTYPES = (Dtype.i8, Dtype.i32, Dtype.i64, Dtype.u8, Dtype.u32, Dtype.u64)

_SIZE_NAME = re.compile(
    r"[A-Za-z]|[A-Z][0-9]?"
    r"|(?i:rows?|cols?|columns?|len|length|size|count|numel|nelem|nelems|width|height|depth|dim|dims|batch|"
    r"seq_?len|hidden|hidden_?size|heads?|vocab|channels?|features?|tokens?|elements?|total|nnz|items?)"
    r"|(?:num_?|n_|len_|total_)\w+|(?:n|len|total)[A-Z]\w*"
    r"|\w*(?:_size|_len|_length|_dim|_count|_rows|_cols|_elems|Size|Len|Length|Dim|Count|Rows|Cols)"
)
_NOT_SIZES = {"i", "j", "x", "y", "z", "a", "b", "c", "s", "t", "p", "q", "r", "u", "v", "w", "e", "f", "g", "h", "o"}


def is_size_name(name: str) -> bool:
    """Whether an integer parameter called ``name`` reads as a size (``n``, ``N``, ``rows``, ``num_tokens``, ``hidden_size``)."""
    if keyword.iskeyword(name) or name in ("min", "max", "cdiv") or name in _NOT_SIZES:
        return False
    return bool(_SIZE_NAME.fullmatch(name))


def used_as_extent(body, name: str, depth: int = 0) -> bool:
    """Whether the integer ``name`` bounds something in the kernel's ``body`` (a tree-sitter node): compared (``i <
    N``, ``idx >= B * T * T``), or the divisor of a ``/`` or ``%`` (``idx % OW``), alone or inside a product or sum,
    directly or through a local declared from it (``int OW = W - KW + 1;``), three deep. A size whatever its name
    (``Nb``, ``OC``, ``KH``), which :func:`is_size_name` cannot tell."""
    if body is None or depth > 3:
        return False
    for n in _walk(body):
        if n.type != "identifier" or _text(n) != name:
            continue
        child, up = n, n.parent
        while up is not None and (up.type == "parenthesized_expression" or up.type == "cast_expression"
                                  or (up.type == "binary_expression" and _text(up.child_by_field_name("operator")) in "*+-")):
            child, up = up, up.parent
        if up is None:
            continue
        if up.type == "binary_expression":
            op = _text(up.child_by_field_name("operator"))
            if op in ("<", "<=", ">", ">=") or (op in ("/", "%") and up.child_by_field_name("right") == child):
                return True
        if up.type == "init_declarator" and up.child_by_field_name("value") == child:
            local = up.child_by_field_name("declarator")
            if local is not None and local.type == "identifier" and used_as_extent(body, _text(local), depth + 1):
                return True
    return False


# --- tree-sitter helpers ------------------------------------------------------------------------------

@lru_cache(maxsize=1)
def _parser() -> ts.Parser:
    return ts.Parser(ts.Language(tree_sitter_cuda.language()))


def _text(node: ts.Node) -> str:
    return node.text.decode()


def _walk(node: ts.Node):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def _kernel_node(root: ts.Node, kernel: KernelDef) -> ts.Node | None:
    """The kernel's ``function_definition`` inside its byte range."""
    outer = root.descendant_for_byte_range(kernel.start_byte, kernel.end_byte) or root
    for n in _walk(outer):
        if n.type == "function_definition" and kernel.start_byte <= n.start_byte and n.end_byte <= kernel.end_byte:
            return n
    return None


def _top_level(root: ts.Node):
    """The file's top-level nodes, looking inside preprocessor conditionals, namespaces and ``extern "C"`` blocks."""
    stack = list(reversed(root.children))
    while stack:
        n = stack.pop()
        yield n
        if n.type.startswith("preproc_if") or n.type in ("preproc_else", "preproc_elif", "namespace_definition",
                                                         "declaration_list", "linkage_specification"):
            stack.extend(reversed(n.children))


# --- roles from the body ------------------------------------------------------------------------------

_COMPARE = {"==", "!=", "<", "<=", ">", ">=", "&&", "||"}


def _uses(body: ts.Node | None, name: str, depth: int = 0) -> tuple[list[int], list[int], list[tuple[int, str]]]:
    """(lines read, lines written, [(line, what)] uses the scaffolder cannot follow) of pointer ``name`` in ``body``;
    through local aliases too (``float* row = y + r * N;``: the uses of ``row``), three deep."""
    reads: list[int] = []
    writes: list[int] = []
    unknown: list[tuple[int, str]] = []
    if body is None:
        return reads, writes, unknown
    for n in _walk(body):
        if n.type != "identifier" or _text(n) != name:
            continue
        line = n.start_point[0] + 1
        parent = n.parent
        if parent.type in ("pointer_declarator", "array_declarator", "reference_declarator", "declaration") or (
                parent.type == "init_declarator" and parent.child_by_field_name("declarator") == n):
            continue  # the name being declared (an alias's own declaration), not a use
        access = None
        if parent.type == "subscript_expression" and parent.child_by_field_name("argument") == n:
            access = parent
        elif parent.type == "pointer_expression" and _text(parent.child_by_field_name("operator")) == "*":
            access = parent
        elif parent.type == "field_expression" and parent.child_by_field_name("argument") == n:
            access = parent  # p->x
        elif parent.type == "binary_expression" and _text(parent.child_by_field_name("operator")) in _COMPARE:
            continue  # compares the pointer, not the data
        elif parent.type == "binary_expression" and _text(parent.child_by_field_name("operator")) in "+-":
            up = parent.parent
            if up is not None and up.type == "parenthesized_expression" and up.parent is not None \
                    and up.parent.type == "pointer_expression" and _text(up.parent.child_by_field_name("operator")) == "*":
                access = up.parent  # *(p + i)
        holder = parent.parent if parent.type == "binary_expression" else parent
        if access is None and depth < 3 and holder is not None and holder.type == "init_declarator" \
                and holder.child_by_field_name("value") in (n, parent):
            alias = holder.child_by_field_name("declarator")
            while alias is not None and alias.type == "pointer_declarator":
                alias = alias.child_by_field_name("declarator")
            if alias is not None and alias.type == "identifier":
                r, w, u = _uses(body, _text(alias), depth + 1)
                reads += r
                writes += w
                unknown += u
                continue
        if access is None and _atomic_address(n):
            reads.append(line)  # atomicAdd(p, v), atomicMax((int*)p, v): read, then written
            writes.append(line)
            continue
        if access is None:
            what = "passed on" if parent.type == "argument_list" else "aliased" if parent.type in ("init_declarator", "assignment_expression", "binary_expression", "cast_expression") else "used"
            unknown.append((line, what))
            continue
        while access.parent is not None and access.parent.type == "field_expression" and access.parent.child_by_field_name("argument") == access:
            access = access.parent  # p[i].x
        up = access.parent
        if up is not None and up.type == "assignment_expression" and up.child_by_field_name("left") == access:
            (writes if _text(up.child_by_field_name("operator")) == "=" else reads).append(line)
            if _text(up.child_by_field_name("operator")) != "=":
                writes.append(line)
        elif up is not None and up.type == "update_expression":
            reads.append(line)
            writes.append(line)
        elif up is not None and up.type == "pointer_expression" and _text(up.child_by_field_name("operator")) == "&":
            unknown.append((line, "address taken"))  # atomicAdd(&p[i], v), a helper's pointer
        else:
            reads.append(line)
    return reads, writes, unknown


# Atomics whose result depends on the order the threads reach them when the buffer holds floats (additions round
# in that order; an exchange keeps whichever came last); max, min and the bitwise ones do not.
_ORDERED_ATOMICS = ("atomicAdd", "atomicSub", "atomicExch", "atomicCAS")


def _float_atomic_line(body: ts.Node | None, name: str) -> int | None:
    """The first line where ``body`` applies an order-dependent atomic to pointer ``name`` (``atomicAdd(p, v)``,
    ``atomicAdd(p + i, v)``, ``atomicAdd(&p[i], v)``, the ``_block``/``_system`` forms too), or None."""
    if body is None:
        return None
    for n in _walk(body):
        if n.type != "call_expression":
            continue
        fn = _text(n.child_by_field_name("function"))
        if not fn.startswith(_ORDERED_ATOMICS):
            continue
        args = n.child_by_field_name("arguments")
        first = args.named_children[0] if args is not None and args.named_children else None
        if first is not None and any(c.type == "identifier" and _text(c) == name for c in _walk(first)):
            return n.start_point[0] + 1
    return None


def _divisor_line(body: ts.Node | None, name: str) -> int | None:
    """The first line where a value loaded from buffer ``name`` divides (``x / deg[u]``, ``% counts[i]``, or through
    a local declared from the load: ``int d = deg[u]; ... / d``), else None: such a buffer holds no zeros."""
    if body is None:
        return None
    locals_from = {_text(n.child_by_field_name("declarator")) for n in _walk(body) if n.type == "init_declarator"
                   and _is_load_of(n.child_by_field_name("value"), name)}
    for n in _walk(body):
        op = n.child_by_field_name("operator") if n.type in ("binary_expression", "assignment_expression") else None
        if op is None or _text(op) not in ("/", "%", "/=", "%="):
            continue
        right = uncast(n.child_by_field_name("right"))
        if _is_load_of(right, name) or (right is not None and right.type == "identifier" and _text(right) in locals_from):
            return n.start_point[0] + 1
    return None


def _is_load_of(node: ts.Node | None, name: str) -> bool:
    node = uncast(node)
    return node is not None and node.type == "subscript_expression" and _text(node.child_by_field_name("argument")) == name


def _atomic_only_line(body: ts.Node | None, name: str) -> int | None:
    """The first line of an atomic on pointer ``name`` when every mention of ``name`` in ``body`` is inside an atomic's
    address argument (``atomicAdd(&out[b], v)``, ``atomicMax(p + i, v)``: an accumulator the kernel never reads
    otherwise), else None."""
    if body is None:
        return None
    uses = [n for n in _walk(body) if n.type == "identifier" and _text(n) == name]
    first = None
    for u in uses:
        node, inside = u, False
        while node is not None and node is not body:
            parent = node.parent
            if parent is not None and parent.type == "argument_list" and parent.named_children and parent.named_children[0] == node:
                call = parent.parent
                if call is not None and call.type == "call_expression" and _text(call.child_by_field_name("function")).startswith("atomic"):
                    inside = True
                    first = call.start_point[0] + 1 if first is None else min(first, call.start_point[0] + 1)
                break
            node = parent
        if not inside:
            return None
    return first


def _atomic_address(n: ts.Node) -> bool:
    """``n`` (a pointer's name) is an atomic's address as it is or viewed as another element type of its width:
    ``atomicAdd(p, v)``, ``atomicMax((int*)p, __float_as_int(v))`` (a float max through the int atomic)."""
    node = n
    if node.parent is not None and node.parent.type == "cast_expression" and node.parent.child_by_field_name("value") == n:
        desc = node.parent.child_by_field_name("type")
        decl = desc.child_by_field_name("declarator") if desc is not None else None
        if decl is None or decl.type != "abstract_pointer_declarator" or decl.named_child_count:
            return False
        node = node.parent
    parent = node.parent
    return parent is not None and parent.type == "argument_list" and parent.named_children[:1] == [node] \
        and _text(parent.parent.child_by_field_name("function")).startswith("atomic")


def _unwrap(node: ts.Node | None) -> ts.Node | None:
    """``node`` with parentheses and casts taken off (``(int)(q[i])`` -> ``q[i]``)."""
    while node is not None and node.type in ("parenthesized_expression", "cast_expression"):
        node = node.child_by_field_name("value") if node.type == "cast_expression" else (node.named_children or [None])[0]
    return node


def _single_index(subscript: ts.Node) -> ts.Node | None:
    """The one index of ``p[i]`` (parentheses and casts unwrapped), or None for ``p[i][j]``-style or empty indices."""
    idx = [c for c in subscript.child_by_field_name("indices").named_children if c.type != "comment"]
    return _unwrap(idx[0]) if len(idx) == 1 else None


def _fixed_extent(body: ts.Node | None, name: str, byte_buffers: set[str]) -> tuple[int, str] | None:
    """``(elements, why)`` when every use of pointer ``name`` reaches a fixed number of elements whatever the sizes:
    only literal indices (``p[0]``, ``*p``, ``atomicAdd(p, v)``: element 0; ``p[3]``: four), or only indices read from a
    byte buffer (``bins[data[i]]``, data u8 or i8: 256 bins). None for any other use (an index, an alias, a helper)."""
    if body is None:
        return None
    largest, by_byte, seen = -1, False, False
    for n in _walk(body):
        if n.type != "identifier" or _text(n) != name:
            continue
        seen, parent = True, n.parent
        if parent.type == "subscript_expression" and parent.child_by_field_name("argument") == n:
            inner = _single_index(parent)
            if inner is not None and inner.type == "number_literal" and re.fullmatch(r"\d+[uUlL]*", _text(inner)):
                largest = max(largest, int(re.sub(r"[uUlL]", "", _text(inner))))
                continue
            if inner is not None and inner.type == "subscript_expression" and _text(inner.child_by_field_name("argument")) in byte_buffers:
                by_byte = True
                continue
            return None
        if parent.type == "pointer_expression" and _text(parent.child_by_field_name("operator")) == "*":
            largest = max(largest, 0)
            continue
        if _atomic_address(n):
            largest = max(largest, 0)
            continue
        return None
    if not seen:
        return None
    if by_byte:
        return max(256, largest + 1), "indexed by a byte buffer's values: one element per value"
    return largest + 1, f"only element{'s 0 to ' + str(largest) if largest else ' 0'} used, at fixed indices"


def _thread_extent(body: ts.Node | None, name: str, index: dict[str, str], bounds: dict[str, str]) -> list[str] | None:
    """The shape of pointer ``name`` when every use of it is ``name[i]`` with ``i`` the kernel's x index and the kernel
    guards only x (``if (i >= B * C) return;``): one element per thread below the bound, ``["B", "C"]`` for a product
    of size symbols and sums of them (``N * Cout * (2 * L + 1)``: ``["N", "Cout", "2 * L + 1"]``), else ``[bound]``.
    None for any other use (an offset, an alias, a helper) or no such guard."""
    if body is None or set(bounds) != {"x"}:
        return None
    names = [n for n, axis in index.items() if axis == "x"]
    fn = body.parent
    counts: dict[str, int] = {}
    for n in _walk(fn if fn is not None else body):
        if n.type in ("declaration", "parameter_declaration"):
            for d in n.children_by_field_name("declarator"):
                ident = d
                while ident is not None and ident.type != "identifier":
                    ident = ident.child_by_field_name("declarator")
                if ident is not None:
                    counts[_text(ident)] = counts.get(_text(ident), 0) + 1
    by_value = lambda call: bool(PURE_CALL.fullmatch(_text(call.child_by_field_name("function"))))  # noqa: E731
    if any(counts.get(n, 0) > 1 for n in names) or set(names) & maybe_written_names(body, by_value):
        return None  # the index changed or hidden (idx /= C; { int idx = c * N + n; y[idx] = v; }): no longer the thread's
    seen = False
    for n in _walk(body):
        if n.type != "identifier" or _text(n) != name:
            continue
        parent = n.parent
        if parent.type != "subscript_expression" or parent.child_by_field_name("argument") != n:
            return None
        inner = _single_index(parent)
        if inner is None or inner.type != "identifier" or index.get(_text(inner)) != "x":
            return None
        seen = True
    if not seen:
        return None
    bound = bounds["x"]
    parts = _product_factors(bound)
    # sizes and expressions of them (a launcher's output length, 2 * L + 1, (H - 1) // 2 + 1): each a dimension
    if all(re.fullmatch(r"[A-Za-z_]\w*", t) or (re.fullmatch(r"[\w\s+\-*/()]+", t) and re.search(r"[A-Za-z_]", t))
           for t in parts):
        return parts
    return [bound]


def _digit_order(body: ts.Node, index: dict[str, str], dims: list[str], symbols: dict[str, str]) -> str | None:
    """Where the kernel takes its x index apart by ``/`` and ``%`` with every trailing product of ``dims`` (the
    guard's factors in order: ``[N, Cout, Lout]`` needs ``Lout`` and ``Cout * Lout``, as ``idx % Lout``, ``(idx /
    Lout) % Cout``, ``idx / (Lout * Cout)``, compared as polynomials over the spec's symbols), and by no other value
    (``idx % C`` beside them says C is innermost: another layout), the divisions read (``idx % Lout, idx / (Lout *
    Cout)``): the dimensions' order is the kernel's own; else None (a guess)."""
    def key(text: str) -> tuple | None:
        """A product's identity: the polynomial of its polynomial factors and the texts of the others, sorted."""
        for name in set(re.findall(r"[A-Za-z_]\w*", text)):
            if name in symbols:
                text = re.sub(rf"\b{name}\b", f"({symbols[name]})", text)
        if not re.fullmatch(r"[\w\s+\-*/()]+", text):
            return None
        prod: Poly = {(): 1}
        others = []
        for f in _product_factors(text):
            p = poly(_Host._parse_text(f)) if re.fullmatch(r"[\w\s+\-*()]+", f) else None
            if p is None:
                others.append(re.sub(r"\s+", "", f))
            else:
                prod = mul(prod, p)
        return tuple(sorted(prod.items())), tuple(sorted(others))

    tails = [key(" * ".join(f"({d})" for d in dims[j:])) for j in range(len(dims) - 1, 0, -1)]
    if any(t is None for t in tails):
        return None
    seen: dict[tuple, str] = {}
    for n in _walk(body):
        pair = _binary(n, "/") or _binary(n, "%")
        if pair is None or _unparen(pair[0]).type != "identifier" or index.get(_text(_unparen(pair[0]))) != "x":
            continue
        k = key(_text(pair[1]))
        if k is None or k not in tails:
            return None  # idx % C where C is no trailing product (a layout [N, L, C]): the order is not this one
        seen.setdefault(k, " ".join(_text(n).split()))
    if any(t not in seen for t in tails):
        return None
    return ", ".join(seen[t] for t in tails)


def _offsets_init(mean: str) -> tuple[str, Poly]:
    """The init of a buffer of range starts (:func:`.extents.bounded_loop`: CSR row pointers) and its longest step:
    ``offsets(0, 2 * L + 1)``, each range 0 to ``2 * L`` long, ``L`` (``mean``) their mean length, a size of the spec's
    own (no argument gives it)."""
    longest = {(mean,): 2}
    return f"offsets(0, {show(add(longest, {(): 1}))})", longest


def _reach(root: ts.Node, body: ts.Node | None, kdef: KernelDef, symbols: dict[str, str], launch: _Launch | None,
           types: dict[str, str], mean: str
           ) -> tuple[Ranges | None, dict[str, tuple[Extent, list[Access]]], dict[str, ts.Node]]:
    """The ranges of the kernel's index expressions (over the size symbols; the launch's ``blockIdx``/``threadIdx``
    where it was read from the file; the file's integer ``#define``s as their values), for each pointer argument
    whose accesses can all be read, the extent they reach (:mod:`.extents`; an index loaded from an integer buffer
    counts on that buffer's values), and the integer buffers of range starts, each with the loop condition its values
    bound (:func:`.extents.bounded_loop`): drawn by :func:`_offsets_init` over the size ``mean``, their last value
    bounds the indices of the buffers the loop reads."""
    if body is None:
        return None, {}, {}
    indices = {p.name for p in kdef.params if p.is_pointer and _DTYPE_OF.get(types.get(p.type, p.type)) in _INT_DTYPES}
    args = [p.name for p in kdef.params if p.is_pointer]
    order = list(symbols.values())

    def read(loaded: dict[str, Range]) -> tuple[Ranges, dict[str, tuple[Extent, list[Access]]]]:
        ranges = Ranges(body, list(symbols), _launch_ranges(launch), integer_constants(root, kdef.start_byte, kdef.end_byte),
                        loaded)
        reached = {}
        for name in args:
            found = accesses(body, name, ranges)
            ext = extent(ranges, found, order + [mean] * bool(loaded), indices) if found is not None else None
            if ext is not None:
                reached[name] = (ext, found)
        return ranges, reached

    ranges, reached = read({})
    bounded = {n: cond for n in args if n in indices and n in reached and (cond := bounded_loop(ranges, n)) is not None}
    if not bounded:
        return ranges, reached, {}
    longest = _offsets_init(mean)[1]  # the last of n starts: at most (n - 1) ranges at their longest
    ranges, reached = read({n: ({}, mul(add(reached[n][0].size, {(): -1}), longest)) for n in bounded})
    return ranges, reached, bounded


def _assumed_constraints(ranges: Ranges | None, order: list[str]) -> list[str]:
    """The spec constraints for the divisors the reading took to be at least 1 (:attr:`.extents.Ranges.assumed`:
    ``OW = W - 2`` in ``v % OW``), ``W - 2 >= 1``; a product of others (``(H - 2) * (W - 2)``) is left out."""
    assumed = list(ranges.assumed) if ranges is not None else []
    keep = []
    for a in assumed:
        if any(b != a and (q := divide(a, b)) is not None and (q in assumed or (names(q) and nonneg(add(q, {(): -1}))))
               for b in assumed):
            continue
        keep.append(f"{show(a, order)} >= 1")
    return keep


def _launch_ranges(launch: _Launch | None) -> dict[str, Range]:
    """The ranges of ``blockIdx``, ``threadIdx``, ``blockDim`` and ``gridDim`` under a launch read from the file
    (a dimension that is no polynomial of the sizes, ``cdiv(n, 256)``, has no highest value); none for a guessed one."""
    if launch is None or launch.where is None:
        return {}
    out: dict[str, Range] = {}
    for i, axis in enumerate("xyz"):
        for count, index, dims in (("gridDim", "blockIdx", launch.grid), ("blockDim", "threadIdx", launch.block)):
            n = _spec_poly(dims[i] if i < len(dims) else 1)
            if n is not None:
                out[f"{count}.{axis}"] = (n, n)
                out[f"{index}.{axis}"] = ({}, add(n, {(): -1}))
    return out


def _spec_poly(expr: str | int) -> Poly | None:
    """A spec expression of ``+ - *``, names and integers as a polynomial; None for anything else (``cdiv``, ``//``)."""
    if isinstance(expr, int):
        return {(): expr} if expr else {}
    if not re.fullmatch(r"[\w\s+*()-]+", expr):
        return None
    return poly(_Host._parse_text(expr))


def _dim(d: Poly, order: list[str]) -> str | int:
    """A dimension as the spec writes it: an integer, else an expression (``2 * H``)."""
    return d.get((), 0) if not names(d) else show(d, order)


def _fresh(name: str, taken: set[str]) -> str:
    """``name``, else ``name2``, ``name3``, ...: the first not in ``taken``."""
    return next(n for n in (name, *(f"{name}{i}" for i in range(2, len(taken) + 3))) if n not in taken)


def _mean_todo(mean: str, starts: list[str], reached: dict[str, tuple[Extent, list[Access]]]) -> str:
    """The sizes' TODO on the size ``mean`` of :func:`_offsets_init`, the mean length of the ranges the buffers
    ``starts`` start, naming the buffers sized for every range at its longest (their extents use ``mean``)."""
    longest = [n for n, (ext, _) in reached.items() if mean in names(ext.size)]
    sized = f"; {', '.join(longest)} {'is' if len(longest) == 1 else 'are'} sized for every range at its longest, twice " \
            "the mean" if longest else ""
    return f"TODO sizes: {mean} is the mean length of the ranges {', '.join(starts)} start, a size of the spec's own (no " \
           f"argument gives it){sized}"


def _reached_shape(found: tuple[Extent, list[Access]] | None, symbol_list: list[str], source_name: str,
                   starts: bool = False) -> tuple[list | None, str, bool] | None:
    """``(shape, why, guess)`` from the extent a buffer's accesses reach: the shape and its note, a TODO (``guess``)
    where the order of dimensions taken from a flat product is a guess, or where a dimension is not one term (``H *
    W - W``: likely a guard not read) and every size symbol would not hold it; ``(None, what they reach, True)`` when
    every size symbol holds it (the guess stays); None when nothing was read. ``starts``: the buffer holds range
    starts and the end of the last (:func:`.extents.bounded_loop`), so one element past a product of sizes (``S +
    1``) is no guess."""
    if found is None:
        return None
    ext = found[0]
    shape = [_dim(d, symbol_list) for d in ext.dims]
    where = f"{' '.join(_text(ext.access.node).split())} at {source_name}:{ext.access.line}"
    text = f"shape [{', '.join(map(str, shape))}]: the largest index its accesses reach ({where})"
    if ext.plain:
        if ext.split:
            return shape, f"{text}; which product of sizes is which dimension is a guess (a flat index)", True
        return shape, text, False
    total = ext.size
    if starts and len(ext.dims) == 1 and len(count := add(total, {(): -1})) == 1:
        return shape, f"{text}: the starts of {show(count, symbol_list)} ranges and the end of the last", False
    if at_most(total, {tuple(sorted(symbol_list)): 1}):
        return None, f"its accesses reach {show(total, symbol_list)} elements ({where})", True
    return shape, f"{text}; check it: a dimension that is not a product of sizes can also come from a guard this " \
                  "scaffold cannot read", True


def _indexed_init(ranges: Ranges | None, name: str, reached: dict[str, tuple[Extent, list[Access]]],
                  symbol_list: list[str], source_name: str) -> tuple[str, str] | None:
    """``(init, why)`` for an integer buffer whose loaded values index a dimension of another buffer
    (``row[labels[r]]``, row's dimension V: ``randint(0, V)``); None where no such use can be read."""
    if ranges is None:
        return None
    plain = {n: r for n, r in reached.items() if r[0].plain}
    found = indexed_extent(ranges, name, plain)
    if found is None:
        return None
    dim, other, access = found
    bound = _dim(dim, symbol_list)
    where = f"{' '.join(_text(access.node).split())} at {source_name}:{access.line}"
    return f"randint(0, {bound})", f"init randint(0, {bound}): its values index {other}'s dimension of {bound} ({where})"


# Values of the float scalars a signature cannot tell (alpha, beta, lr, ...): each its own, none 0 or 1, so that a
# candidate that drops a scalar, or swaps two, changes the outputs and fails the check (at 1.0, alpha * x == x);
# all inside (0, 1), where a decay rate or a momentum must be (a beta above 1 makes an optimizer's state blow up).
_FLOAT_SCALAR_VALUES = (0.75, 0.5, 0.875, 0.625, 0.375, 0.9375, 0.25, 0.8125)


# --- host expressions to spec expressions --------------------------------------------------------------

class _Untranslatable(Exception):
    pass


_CDIV_NAMES = {"cdiv", "ceil_div", "ceildiv", "div_up", "divup", "DIV_UP", "CEIL_DIV", "CDIV", "DIVUP", "div_round_up",
               "DIV_ROUND_UP", "ceilDiv", "divUp", "cuda::ceil_div"}


class _Host:
    """Translates the host-side expressions of one launch into spec expressions over the size symbols."""

    def __init__(self, root: ts.Node, scope: ts.Node, symbols: dict[str, str], types: dict[str, str]):
        self.root, self.scope, self.symbols, self.types = root, scope, symbols, types
        self.defines = {}
        for n in _top_level(root):
            if n.type == "preproc_def" and n.child_by_field_name("value") is not None:
                self.defines[_text(n.child_by_field_name("name"))] = n.child_by_field_name("value")

    def definition(self, name: str, before: int) -> ts.Node | None:
        """The last declaration of ``name`` before byte ``before`` in the enclosing function, else in the file:
        its initializer (an expression, an argument list, an initializer list)."""
        best = None
        for nodes in (_walk(self.scope), (d for t in _top_level(self.root) if t.type == "declaration" for d in _walk(t))):
            for n in nodes:
                if n.start_byte >= before:
                    continue
                if n.type == "init_declarator" and _text(n.child_by_field_name("declarator")) == name:
                    best = n.child_by_field_name("value")
                elif n.type == "function_declarator" and n.parent is not None and n.parent.type == "declaration" \
                        and _text(n.child_by_field_name("declarator")) == name:
                    best = n.child_by_field_name("parameters")  # dim3 block(threads): C++'s most vexing parse
            if best is not None:
                return best
        return None

    def dims(self, node: ts.Node, depth: int = 0) -> list[str]:
        """A grid or block argument as 1-3 spec expressions."""
        node = self._unwrap(node)
        if node.type == "call_expression" and _text(node.child_by_field_name("function")) == "dim3":
            return self._list(node.child_by_field_name("arguments"), depth)
        if node.type in ("initializer_list", "argument_list", "parameter_list"):
            return self._list(node, depth)
        if node.type == "identifier" and _text(node) not in self.symbols and depth < 8:
            init = self.definition(_text(node), node.start_byte)
            if init is not None and init.type in ("initializer_list", "argument_list", "parameter_list") or (
                    init is not None and init.type == "call_expression" and _text(init.child_by_field_name("function")) == "dim3"):
                return self.dims(init, depth + 1)
        return [self.expr(node, depth)]

    def _list(self, node: ts.Node, depth: int) -> list[str]:
        items = [c for c in node.named_children if c.type != "comment"]
        if not 1 <= len(items) <= 3:
            raise _Untranslatable(_text(node))
        out = [self.expr(c.child_by_field_name("type") if c.type == "parameter_declaration" else c, depth) for c in items]
        while len(out) > 1 and out[-1] == "1":
            out.pop()
        return out

    @staticmethod
    def _unwrap(node: ts.Node) -> ts.Node:
        while node.type in ("parenthesized_expression",) and node.named_child_count == 1:
            node = node.named_children[0]
        return node

    def _ceil_div(self, node, depth: int) -> str | None:
        """``cdiv(a, b)`` for ``(a + b - 1) / b``, ``(a + (b - 1)) / b`` or ``(a + k) / b`` with ``k = b - 1`` (literals):
        the grid written as a rounded-up division, whatever ``a`` is (a launch ``tune`` can then recompute); else None."""
        left, right = _binary(node, "/") or (None, None)
        if left is None:
            return None
        den = self.expr(right, depth)
        sub = _binary(left, "-")
        if sub is not None and _text(_unparen(sub[1])) == "1":
            add = _binary(sub[0], "+")
            if add is not None and self.expr(add[1], depth) == den:
                return f"cdiv({_tidy(self.expr(add[0], depth))}, {den})"
        add = _binary(left, "+")
        if add is None:
            return None
        inner = _binary(add[1], "-")
        if inner is not None and _text(_unparen(inner[1])) == "1" and self.expr(inner[0], depth) == den:
            return f"cdiv({_tidy(self.expr(add[0], depth))}, {den})"
        k = self.expr(add[1], depth)
        if k.isdigit() and den.isdigit() and int(k) == int(den) - 1:
            return f"cdiv({_tidy(self.expr(add[0], depth))}, {den})"
        return None

    def expr(self, node: ts.Node, depth: int = 0) -> str:
        """One integer expression; raises _Untranslatable for anything the spec language cannot say."""
        if depth > 8:
            raise _Untranslatable(_text(node))
        t = node.type
        if t in ("number_literal",):
            text = _text(node).rstrip("uUlL")
            try:
                return str(int(text, 0))
            except ValueError:
                raise _Untranslatable(_text(node)) from None
        if t in ("identifier", "type_identifier"):
            name = _text(node)
            if name in self.symbols:
                return self.symbols[name]
            init = self.definition(name, node.start_byte)
            if init is None and name in self.defines:
                init = self._parse_text(_text(self.defines[name]))
            if init is None or init.type in ("initializer_list", "argument_list", "parameter_list"):
                raise _Untranslatable(name)
            return self._paren(self.expr(init, depth + 1))
        if t == "parenthesized_expression" and node.named_child_count == 1:
            return self._paren(self.expr(node.named_children[0], depth))  # (n) and (cdiv(a, b)) need none
        if t == "binary_expression":
            op = _text(node.child_by_field_name("operator"))
            ops = {"+": "+", "-": "-", "*": "*", "/": "//", "%": "%"}
            if op not in ops:
                raise _Untranslatable(_text(node))
            if op == "/":
                ceil = self._ceil_div(node, depth)
                if ceil is not None:
                    return ceil
            return f"{self.expr(node.child_by_field_name('left'), depth)} {ops[op]} {self.expr(node.child_by_field_name('right'), depth)}"
        if t == "unary_expression" and _text(node.child_by_field_name("operator")) in "+-":
            return f"{_text(node.child_by_field_name('operator'))}{self.expr(node.child_by_field_name('argument'), depth)}"
        if t == "cast_expression":
            return self.expr(node.child_by_field_name("value"), depth)
        if t == "conditional_expression":  # a > K ? K : a (a user's grid cap) is min(a, K); a > K ? a : K is max(a, K)
            cond = _unparen(node.child_by_field_name("condition"))
            op = _text(cond.child_by_field_name("operator")) if cond is not None and cond.type == "binary_expression" else ""
            if op in ("<", "<=", ">", ">="):
                left, right = (self.expr(cond.child_by_field_name(f), depth) for f in ("left", "right"))
                then, other = (self.expr(node.child_by_field_name(f), depth) for f in ("consequence", "alternative"))
                if {then, other} == {left, right} and left != right:
                    larger = left if op in (">", ">=") else right  # the side the condition holds larger
                    return f"{'max' if then == larger else 'min'}({left}, {right})"
            raise _Untranslatable(_text(node))
        if t == "field_expression":
            return self._paren(self._member(node, depth))
        if t == "sizeof_expression":
            ty = node.child_by_field_name("type")
            name = " ".join(_text(ty).split()) if ty is not None else ""
            name = self.types.get(name, name)
            if name in _SIZEOF:
                return str(_SIZEOF[name])
            raise _Untranslatable(_text(node))
        if t == "call_expression":
            fname = _text(node.child_by_field_name("function"))
            args = [c for c in node.child_by_field_name("arguments").named_children if c.type != "comment"]
            short = fname.split("::")[-1]
            if (fname in _CDIV_NAMES or short in _CDIV_NAMES) and len(args) == 2:
                return f"cdiv({self.expr(args[0], depth)}, {self.expr(args[1], depth)})"
            if short in ("min", "max", "fmin", "fmax", "umin", "umax") and len(args) >= 2:
                f = "min" if "min" in short else "max"
                return f"{f}({', '.join(self.expr(a, depth) for a in args)})"
            if fname in ("static_cast", "int") and len(args) == 1:  # (its parentheses group it: (a + b) / 2)
                return self._paren(self.expr(args[0], depth))
            if node.child_by_field_name("function").type == "template_function" and \
                    _text(node.child_by_field_name("function").child_by_field_name("name")) in ("static_cast",) and len(args) == 1:
                return self._paren(self.expr(args[0], depth))
        raise _Untranslatable(_text(node))

    def _member(self, node: ts.Node, depth: int) -> str:
        """``block.x`` (``.y``, ``.z``) of a ``dim3`` defined in the file (``dim3 block(16, 16)``): that dimension of
        its definition (``1`` past the ones it gives); raises _Untranslatable for any other member."""
        arg, member = node.child_by_field_name("argument"), _text(node.child_by_field_name("field"))
        init = self.definition(_text(arg), node.start_byte) if arg is not None and arg.type == "identifier" else None
        if member not in ("x", "y", "z") or init is None or not (
                init.type in ("initializer_list", "argument_list", "parameter_list")
                or (init.type == "call_expression" and _text(init.child_by_field_name("function")) == "dim3")):
            raise _Untranslatable(_text(node))
        dims = self.dims(init, depth + 1)
        axis = "xyz".index(member)
        return dims[axis] if axis < len(dims) else "1"

    @staticmethod
    def _paren(text: str) -> str:
        call = re.fullmatch(r"\w+\((.*)\)", text)  # cdiv(a, b): an atom when its parentheses close at the end
        return text if re.fullmatch(r"[\w.]+|\(.*\)", text) or (call and _balanced(call.group(1))) else f"({text})"

    @staticmethod
    def _parse_text(text: str) -> ts.Node | None:
        tree = _parser().parse(f"int __ptx_scaffold = {text};".encode())
        for n in _walk(tree.root_node):
            if n.type == "init_declarator":
                return n.child_by_field_name("value")
        return None


def _unparen(node):
    while node is not None and node.type == "parenthesized_expression" and node.named_child_count == 1:
        node = node.named_children[0]
    return node


def _binary(node, op: str):
    """(left, right) of ``node`` (parentheses dropped) when it is ``left op right``, else None."""
    node = _unparen(node)
    if node is None or node.type != "binary_expression" or _text(node.child_by_field_name("operator")) != op:
        return None
    return node.child_by_field_name("left"), node.child_by_field_name("right")


def _simplified(expr: str, order: Sequence[str] = ()) -> str:
    """``expr`` (a spec expression) written as its polynomial where it is one of names and integers (``(L - 1) * 2 -
    2 * 1 + 2 * (3 - 1) + 1`` -> ``2 * L + 1``: a launcher's arithmetic on its literals); ``expr`` itself for any other
    (a division, a call: ``//`` is no C and ``cdiv`` no polynomial) or where the polynomial is not shorter."""
    if not re.fullmatch(r"[\w\s+\-*()]+", expr):  # a division or a call: its sums simplified alone, innermost first
        inner = expr
        while True:
            step = re.sub(r"\((\d+)\)", r"\1", inner)  # (3): a number needs no parentheses
            step = re.sub(r"\(([\w\s+\-*]+)\)", lambda m: f"({_simplified(m.group(1), order)})"
                          if re.search(r"[+\-*]", m.group(1)) else m.group(0), step)
            step = re.sub(r"\((\d+)\)", r"\1", step)
            if step == inner:
                break
            inner = step
        return inner if len(inner) < len(expr) else expr
    p = poly(_Host._parse_text(expr))
    if p is None or any(c < 0 for m, c in p.items() if m) and not any(c > 0 for m, c in p.items() if m):
        return expr
    out = show(p, order)
    return out if len(out) < len(expr) else expr


def _product_factors(bound: str) -> list[str]:
    """The factors of a product at its top level (``N * Cout * (2 * L + 1)`` -> ``["N", "Cout", "2 * L + 1"]``, the
    parentheses of a whole factor dropped); ``[bound]`` where it is no product."""
    while bound.startswith("(") and bound.endswith(")") and _balanced(bound[1:-1]):
        bound = bound[1:-1].strip()
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(bound):
        depth += ch == "("
        depth -= ch == ")"
        if ch in "+-" and depth == 0 and bound[:i].strip():
            return [bound]  # N * C + 1: a sum, no product of dimensions
        if ch == "*" and depth == 0:
            parts.append(bound[start:i])
            start = i + 1
    parts.append(bound[start:])
    out = []
    for part in (p.strip() for p in parts):
        while part.startswith("(") and part.endswith(")") and _balanced(part[1:-1]):
            part = part[1:-1].strip()
        out.append(part)
    return out if all(out) else [bound]


def _tidy(expr: str) -> str:
    """``(n + 256 - 1) // 256`` and ``(n + 255) // 256`` -> ``cdiv(n, 256)`` (anywhere in ``expr``); redundant
    outer parentheses dropped."""
    def ceil(m: re.Match) -> str:
        name, add, div = m.group(1), int(m.group(2)), int(m.group(4))
        minus = int(m.group(3) or 0)
        return f"cdiv({name}, {div})" if add - minus == div - 1 else m.group(0)

    pattern = r"\((\w+) \+ (\d+)(?: - (\d+))?\) // (\d+)\b"
    expr = re.sub(r"\(" + pattern + r"\)", ceil, expr)
    expr = re.sub(pattern, ceil, expr)
    while expr.startswith("(") and expr.endswith(")") and _balanced(expr[1:-1]):
        expr = expr[1:-1]
    return expr


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if depth < 0:
            return False
    return depth == 0


# --- the scaffold --------------------------------------------------------------------------------------

@dataclass
class _Launch:
    grid: list[str | int]
    block: list[str | int]
    shared_mem: str | int = 0
    comment: str = ""
    todo: str | None = None
    where: str | None = None
    template_args: list[str | None] | None = None


def _num(expr: str) -> str | int:
    """An integer for a constant expression (``128 * 4`` -> 512), else the expression."""
    try:
        if not symbols_in(expr):
            value = evaluate(expr, {})
            if isinstance(value, int):
                return value
    except ExprError:
        pass
    return expr


def _default_launch(symbols: list[str], why: str, two_d: bool = False) -> _Launch:
    """One thread per element: 256 per block, or, for a kernel that indexes with ``threadIdx.y``/``blockIdx.y``
    (``two_d``) and has two or more size symbols, 32 x 8 blocks with x over the last symbol, y over the first."""
    if two_d and len(symbols) >= 2:
        first, last = symbols[0], symbols[-1]
        return _Launch(grid=[f"cdiv({last}, 32)", f"cdiv({first}, 8)"], block=[32, 8],
                       todo=f"launch: {why}; the kernel uses threadIdx.y/blockIdx.y: guessed one thread per element, "
                            f"32 x 8 blocks, x over {last}, y over {first}")
    total = " * ".join(symbols)
    return _Launch(grid=[f"cdiv({total}, 256)"], block=[256], todo=f"launch: {why}; guessed one thread per element, 256 per block")


_CAST = re.compile(r"\(\s*(?:const\s+)?(?:unsigned|signed|long|int|size_t|int64_t|uint64_t|int32_t|uint32_t|\s)+\)")


def _global_index(value: str, axis: str) -> bool:
    """Whether ``value`` (an initialiser's text) is ``blockIdx.a * blockDim.a + threadIdx.a`` in any order, casts aside."""
    t = _CAST.sub("", re.sub(r"\s+", " ", value)).replace(" ", "").replace("(", "").replace(")", "")
    b, d, i = f"blockIdx.{axis}", f"blockDim.{axis}", f"threadIdx.{axis}"
    return t in {f"{b}*{d}+{i}", f"{d}*{b}+{i}", f"{i}+{b}*{d}", f"{i}+{d}*{b}"}


def _guard_bounds(body: ts.Node, symbols: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """``(index, bounds)`` of a kernel's guards: ``index`` maps each global-index variable (``T i = blockIdx.x *
    blockDim.x + threadIdx.x``) to its axis, ``bounds`` each axis to the bound its index is compared with (``i < M``,
    ``if (row >= rows) return;``), a spec expression of the size symbols (locals declared from the sizes read
    through). A variable that is the block index of y or z (``int c = blockIdx.y;``, one block per value) has the
    axis ``by`` or ``bz``. Axes without such a guard are absent."""
    index: dict[str, str] = {}  # variable -> axis ("by"/"bz": a block index, one block per value)
    for n in _walk(body):
        if n.type == "init_declarator" and n.child_by_field_name("value") is not None:
            name, value = _text(n.child_by_field_name("declarator")), _text(n.child_by_field_name("value"))
            if not re.fullmatch(r"\w+", name):
                continue
            for axis in ("x", "y"):
                if _global_index(value, axis):
                    index[name] = axis
            block = re.fullmatch(r"blockIdx\.([yz])", _CAST.sub("", value).replace(" ", "").strip("()"))
            if block:
                index[name] = "b" + block.group(1)
    # locals declared from the sizes (int OH = H - KH + 1; int total = N * OH * OW;): read through in a bound
    local: dict[str, str] = {}
    for n in _walk(body):
        if n.type == "init_declarator" and n.child_by_field_name("value") is not None:
            name, value = _text(n.child_by_field_name("declarator")), _CAST.sub("", _text(n.child_by_field_name("value"))).strip()
            if re.fullmatch(r"\w+", name) and re.fullmatch(r"[\w\s+*()-]+", value) \
                    and set(re.findall(r"[A-Za-z_]\w*", value)) <= set(symbols) | set(local):
                local.setdefault(name, re.sub(r"[A-Za-z_]\w*", lambda m: f"({local[m.group(0)]})" if m.group(0) in local
                                              else m.group(0), " ".join(value.split())))
    bounds: dict[str, str] = {}
    for n in _walk(body):
        if n.type != "binary_expression" or len(n.children) != 3:
            continue
        left, op, right = n.children[0], _text(n.children[1]), n.children[2]
        for idx, bound, ok in ((left, right, op in ("<", ">=")), (right, left, op in (">", "<="))):
            name = _text(idx)
            if not ok or name not in index or index[name] in bounds:
                continue
            expr = _CAST.sub("", _text(bound)).strip()
            expr = re.sub(r"[A-Za-z_]\w*", lambda m: f"({local[m.group(0)]})" if m.group(0) in local and m.group(0) not in symbols
                          else m.group(0), expr)
            names = set(re.findall(r"[A-Za-z_]\w*", expr))
            if names and names <= set(symbols) and re.fullmatch(r"[\w\s+*()-]+", expr):
                bounds[index[name]] = re.sub(r"[A-Za-z_]\w*", lambda m: symbols[m.group(0)], " ".join(expr.split()))
    return index, bounds


def _guard_launch(body: ts.Node, symbols: dict[str, str], kernel: str, why: str | None = None) -> _Launch | None:
    """The launch a kernel's own guard implies, for a file without its launch: the global index of each axis
    (``T i = blockIdx.x * blockDim.x + threadIdx.x``) compared with a bound made of size parameters (``i < M``,
    ``if (row >= rows) return;``) gives one thread per index below the bound: 256 per block on x alone, 32 x 8
    blocks on x and y. None when no axis has such a guard (then one thread per element is guessed)."""
    _, bounds = _guard_bounds(body, symbols)
    if "x" not in bounds:
        return None
    why = why or f"no {kernel}<<<...>>> in this file"
    # a guarded block index of y or z (int c = blockIdx.y; if (c >= C) return;): one block per value on that axis
    y = f"cdiv({bounds['y']}, 8)" if "y" in bounds else bounds.get("by", "1")
    z = [bounds["bz"]] if "bz" in bounds else []
    grid_yz = [y, *z] if y != "1" or z else []
    per_block = "".join(f" and one block per {a} index below {bounds['b' + a]}" for a in ("y", "z") if "b" + a in bounds)
    if "y" in bounds:
        return _Launch(grid=[f"cdiv({bounds['x']}, 32)", *grid_yz], block=[32, 8],
                       todo=f"launch: {why}; from the kernel's guards, one thread per x index "
                            f"below {bounds['x']} and per y index below {bounds['y']}{per_block}, 32 x 8 blocks")
    return _Launch(grid=[f"cdiv({bounds['x']}, 256)", *grid_yz], block=[256],
                   todo=f"launch: {why}; from the kernel's guard{'s' if per_block else ''}, one thread per index below "
                        f"{bounds['x']}{per_block}, 256 per block")


def _constant_names(node: ts.Node, site: _LaunchSite, host: "_Host", depth: int = 0) -> bool:
    """Every name ``node`` reads is a ``#define`` (no local of that name) or a stable local of the launcher
    (:meth:`_LaunchSite.stable`) whose initializer is constant too."""
    for m in _walk(node):
        if m.type != "identifier":
            continue
        name = _text(m)
        if name in host.defines and name not in site.declared:
            continue
        if depth >= 8 or not site.stable(name):
            return False
        init = host.definition(name, site.call.start_byte)
        if init is None or not _constant_names(init, site, host, depth + 1):
            return False
    return True


def _launch_count(root: ts.Node, kernel: KernelDef) -> int:
    """How many ``NAME<<<...>>>`` launches of the kernel the file holds."""
    return len(re.findall(rb"\b" + re.escape(kernel.name.encode()) + rb"\s*(?:<[^<>;]*>)?\s*<<<", root.text))


def _launch_call(root: ts.Node, kernel: KernelDef, kernel_node: ts.Node) -> ts.Node | None:
    """The ``NAME<<<...>>>(...)`` call nearest the kernel's definition, None when the file has none."""
    calls = []
    for m in re.finditer(rb"<<<", root.text):  # the launches, without walking the whole tree
        n = root.descendant_for_byte_range(root.start_byte + m.start(), root.start_byte + m.end())
        while n is not None and n.type != "call_expression":
            n = n.parent
        if n is None or not any(c.type == "kernel_call_syntax" for c in n.children):
            continue
        fn = n.child_by_field_name("function")
        name_node = fn.child_by_field_name("name") if fn.type == "template_function" else fn
        if name_node is not None and _text(name_node) == kernel.name:
            calls.append(n)
    if not calls:
        return None
    return min(calls, key=lambda c: min(abs(c.start_byte - kernel_node.start_byte), abs(c.start_byte - kernel_node.end_byte)))


@dataclass
class _LaunchSite:
    """The launcher around a kernel's ``NAME<<<...>>>(...)``: its arguments, the launcher's own parameters, how often
    each local is declared in it and which locals it assigns (or takes the address of) anywhere."""
    call: ts.Node
    scope: ts.Node
    args: list[ts.Node]
    params: set[str]
    declared: dict[str, int]
    written: set[str]

    def stable(self, var: str) -> bool:
        """``var`` is a local of the launcher declared once and never assigned again: its value at the launch is its
        initializer's."""
        return var not in self.params and self.declared.get(var) == 1 and var not in self.written


def _launch_site(root: ts.Node, kernel: KernelDef, kernel_node: ts.Node) -> _LaunchSite | None:
    """The launch nearest the kernel's definition (:func:`_launch_call`) with its launcher read; None without one."""
    call = _launch_call(root, kernel, kernel_node)
    if call is None:
        return None
    scope = call
    while scope.parent is not None and scope.type != "function_definition":
        scope = scope.parent
    params = set()
    decl = scope.child_by_field_name("declarator") if scope.type == "function_definition" else None
    while decl is not None and decl.type != "function_declarator":
        decl = decl.child_by_field_name("declarator")
    if decl is not None:
        params = {_text(n) for n in _walk(decl.child_by_field_name("parameters")) if n.type == "identifier"}
    args = [c for c in call.child_by_field_name("arguments").named_children if c.type != "comment"]
    declared: dict[str, int] = {}
    for n in _walk(scope):
        if n.type == "init_declarator":
            d = n.child_by_field_name("declarator")
            if d is not None and d.type == "identifier":
                declared[_text(d)] = declared.get(_text(d), 0) + 1
    # (the kernel's own launch and a by-value callee, cdiv or min, change nothing they are passed)
    written = maybe_written_names(scope, lambda c: c == call or any(k.type == "kernel_call_syntax" for k in c.children)
                                  or _by_value(_text(c.child_by_field_name("function"))))
    return _LaunchSite(call, scope, args, params, declared, written)


def _by_value(function: str) -> bool:
    """A callee that takes its arguments by value (a grid's `cdiv`, `min`/`max`, math, `dim3`, a cast): passing a local
    to it changes nothing."""
    short = function.split("::")[-1]
    return function in _CDIV_NAMES or short in _CDIV_NAMES or short == "dim3" or bool(PURE_CALL.fullmatch(function))


def _launch_config_names(root: ts.Node, site: _LaunchSite) -> set[str]:
    """The launcher's names that the launch configuration (grid, block, shared memory) reads, through the stable
    locals it is computed from (``dim3 grid(cdiv(vox, 256), OC, N)``, ``int vox = D * H``: vox, OC, N, D, H)."""
    host = _Host(root, site.scope, {}, {})
    config = next(c for c in site.call.children if c.type == "kernel_call_syntax")
    out: set[str] = set()
    todo = [config]
    while todo:
        node = todo.pop()
        for n in _walk(node):
            if n.type != "identifier" or _text(n) in out:
                continue
            out.add(_text(n))
            if site.stable(_text(n)) and len(out) < 256:
                init = host.definition(_text(n), site.call.start_byte)
                if init is not None:
                    todo.append(init)
    return out


_FLOAT_LITERAL = re.compile(r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)[fFlL]?")


def _launcher_constants(root: ts.Node, kernel: KernelDef, kernel_node: ts.Node, source_name: str,
                        site: _LaunchSite | None = None) -> dict[str, tuple[int | float, str]]:
    """The scalar parameters the file's launcher passes a constant: a literal (``k<<<...>>>(..., 1.0f)``), a
    ``#define`` or a local declared once with a constant initializer and never assigned again (``int K = 3, stride =
    2; k<<<...>>>(..., K, stride)``): parameter -> (value: an int for an integer parameter, a float otherwise,
    where: ``file:line`` of the launch). A size-like parameter fixed so is no size of its own: placeholder values
    would run the kernel at a stride or a window the file never launches."""
    site = site or _launch_site(root, kernel, kernel_node)
    if site is None or _launch_count(root, kernel) != 1:
        return {}  # (two launches may pass two values: `if (big) { int K = 7; k<<<...>>>(K); } k<<<...>>>(3);`)
    p = site.call.parent
    while p is not None and p != site.scope:
        if p.type == "lambda_expression":
            return {}  # (a lambda's parameter K: its caller gives the value, not the enclosing K's initializer)
        p = p.parent
    host = _Host(root, site.scope, {}, {})
    where = f"{source_name}:{site.call.start_point[0] + 1}"
    out: dict[str, tuple[int | float, str]] = {}
    for p, a in zip(kernel.params, site.args):
        if p.is_pointer:
            continue
        node, depth = a, 0
        while depth < 8 and node is not None:  # through stable locals and #defines to the expression that gives the value
            node = _unparen(node)
            if node.type == "cast_expression":
                node = node.child_by_field_name("value")
            elif node.type == "identifier" and site.stable(_text(node)):
                node = host.definition(_text(node), site.call.start_byte)
            elif node.type == "identifier" and _text(node) in host.defines and _text(node) not in site.declared:
                node = host._parse_text(_text(host.defines[_text(node)]))
            elif node.type == "identifier":
                node = None  # a local assigned again, a parameter, a global: not a constant of the launcher
            else:
                break
            depth += 1
        if node is None or not _constant_names(node, site, host):
            continue  # (an expression still naming a variable: host.expr would read that name's initializer)
        dtype = _DTYPE_OF.get(p.type) or _NEAREST.get(p.type)
        if dtype in _INT_DTYPES:
            try:
                text = _tidy(host.expr(node))
                if symbols_in(text):
                    continue
                out[p.name] = (int(evaluate(text, {})), where)
            except (_Untranslatable, ExprError, ValueError, TypeError):
                continue
        elif dtype is not None and dtype.is_float:
            text = "".join(_text(node).split())
            if _FLOAT_LITERAL.fullmatch(text):
                out[p.name] = (float(text.rstrip("fFlL")), where)
    return out


def _derived_sizes(root: ts.Node, kernel: KernelDef, kernel_node: ts.Node, symbols: dict[str, str],
                   types: dict[str, str], site: _LaunchSite | None = None) -> dict[str, str]:
    """The size parameters whose launch argument the file's launcher computes from the others (``int OD = (D + 2 *
    PAD - KS) / STRIDE + 1; k<<<...>>>(..., D, ..., OD)``): parameter -> that spec expression over the other size
    symbols (``(D + 2 * 1 - 3) // 2 + 1``). Such a parameter is no size of its own: independent placeholder values
    would describe impossible tensors."""
    site = site or _launch_site(root, kernel, kernel_node)
    if site is None:
        return {}
    call, scope, written = site.call, site.scope, site.written
    host_of = {p.name: _text(a) for p, a in zip(kernel.params, site.args) if p.name in symbols and a.type == "identifier"}
    out: dict[str, str] = {}
    for name, var in host_of.items():
        if not site.stable(var):
            continue  # the launcher's own argument (a size given by its caller), declared twice or assigned again
        others = {v: symbols[p] for p, v in host_of.items() if p != name and p not in out}
        host = _Host(root, scope, others, types)
        init = host.definition(var, call.start_byte)
        if init is None or init.type in ("initializer_list", "argument_list", "parameter_list"):
            continue
        try:
            expr = _simplified(_tidy(host.expr(init)), list(others.values()))
        except _Untranslatable:
            continue
        names = set(re.findall(r"[A-Za-z_]\w*", expr)) - {"cdiv", "min", "max"}
        inputs = {v for v, sym in others.items() if sym in names}
        if names and names <= set(others.values()) and not inputs & written:
            out[name] = f"({expr})"  # (parenthesised: it is substituted into products)
    return out


def _find_launch(root: ts.Node, kernel: KernelDef, kernel_node: ts.Node, symbols: dict[str, str],
                 types: dict[str, str], source_name: str, two_d: bool = False) -> _Launch | None:
    """The ``NAME<<<...>>>`` nearest the kernel's definition, translated; None when the file has none."""
    call = _launch_call(root, kernel, kernel_node)
    if call is None:
        return None
    where = f"{source_name}:{call.start_point[0] + 1}"
    scope = call
    while scope.parent is not None and scope.type != "function_definition":
        scope = scope.parent
    # the host's names for the kernel's size parameters: k<<<...>>>(x, y, n) with parameter N -> n is N
    host_symbols = dict(symbols)
    args = [c for c in call.child_by_field_name("arguments").named_children if c.type != "comment"]
    for param, arg in zip(kernel.params, args):
        if param.name in symbols and arg.type == "identifier":
            host_symbols[_text(arg)] = symbols[param.name]
    host = _Host(root, scope, host_symbols, types)
    config = [c for c in next(c for c in call.children if c.type == "kernel_call_syntax").named_children if c.type != "comment"]
    launch_text = _text(call).split(">>>")[0] + ">>>"
    template_args = None
    fn = call.child_by_field_name("function")
    if fn.type == "template_function":
        template_args = []  # only what is known here: a C type with a dtype, an integer, true/false; else None
        for a in fn.child_by_field_name("arguments").named_children:
            text = " ".join(_text(a).split())
            if text in _SIZEOF or text in ("true", "false"):
                template_args.append(text)
                continue
            try:
                value = _num(_tidy(host.expr(a.named_children[0] if a.type == "type_descriptor" and a.named_child_count == 1 else a)))
            except _Untranslatable:
                value = None
            template_args.append(str(value) if isinstance(value, int) else None)
    try:
        if len(config) < 2:
            raise _Untranslatable(launch_text)
        grid = [_num(_tidy(e)) for e in host.dims(config[0])]
        block = [_num(_tidy(e)) for e in host.dims(config[1])]
    except _Untranslatable as exc:
        # the kernel's own guards say which index runs over which size (x over width, y over height); else a guess
        why = f"{launch_text} at {where}: cannot follow {str(exc)!r} back to the size symbols"
        body = kernel_node.child_by_field_name("body")
        launch = (_guard_launch(body, symbols, kernel.name, why) if body is not None else None) or \
            _default_launch(list(dict.fromkeys(symbols.values())), why, two_d)
        launch.template_args = template_args
        return launch
    launch = _Launch(grid=grid, block=block, comment=f"from {' '.join(launch_text.split())} at {where}", where=where,
                     template_args=template_args)
    if len(config) >= 3:
        try:
            launch.shared_mem = _num(_tidy(host.expr(config[2])))
        except _Untranslatable:
            launch.todo = f"launch.shared_mem: cannot follow {_text(config[2])!r} back to the size symbols; give the dynamic shared memory in bytes"
    return launch


def _template(root: ts.Node, kernel_node: ts.Node) -> list[tuple[str, str, str | None]]:
    """(name, kind: "type" | "value", default text or None) of the kernel's template parameters."""
    decl = kernel_node.parent
    while decl is not None and decl.type != "template_declaration":
        decl = decl.parent
    if decl is None:
        return []
    out = []
    for p in decl.child_by_field_name("parameters").named_children:
        kind = "type" if "type_parameter" in p.type else "value"
        name = p.child_by_field_name("name") or p.child_by_field_name("declarator")
        if name is None:
            name = next((c for c in p.named_children if c.type in ("type_identifier", "identifier")), None)
        default = p.child_by_field_name("default_type") or p.child_by_field_name("default_value")
        ptype = p.child_by_field_name("type")
        if kind == "value" and ptype is not None and _text(ptype) == "bool" and default is None:
            default_text = "false"
        else:
            default_text = " ".join(_text(default).split()) if default is not None else None
        out.append((_text(name) if name is not None else "?", kind, default_text))
    return out


_TOKEN = re.compile(r"[\w.+-]+")


def _placeholder_sizes(symbols: list[str], square: bool = False) -> tuple[list[dict[str, int]], list[dict[str, int]]]:
    """Check and bench sizes: the check's products about 1e3 and 6.5e4 elements in odd values (tails are exercised),
    the bench 2**24 elements, every symbol the same power of two. With two or more symbols (rows and columns; batch,
    tokens and channels) the check sizes are oblong: every symbol a different value, the first from about 1:2 between
    the first symbol and the last, the second the other way round, so a launch or an index that swaps any two of
    them leaves elements unwritten or reads past a row, and fails; ``square`` (for derived extents such as
    ``H - KH + 1`` that need them alike: the caller's fallback when the oblong spec does not load) gives every symbol
    the same value."""
    k = len(symbols)

    def odd(v: float) -> int:
        v = max(2, round(v))
        return v + 1 if v % 2 == 0 else v

    if k >= 2 and not square:
        r = 2 ** (1 / (k - 1))  # neighbours r apart, the first and last symbols 2x
        check = []
        for total, sign in ((1000, 1), (65536, -1)):
            base = total ** (1 / k)
            values = [odd(base * r ** (sign * (i - (k - 1) / 2))) for i in range(k)]
            # (rounding may make two alike: each kept at least 2 above its smaller neighbour, still odd)
            order = range(1, k) if sign > 0 else range(k - 2, -1, -1)
            for i in order:
                values[i] = max(values[i], values[i - sign] + 2)
            check.append(dict(zip(symbols, values)))
    else:
        check = [{s: odd(total ** (1 / k)) for s in symbols} for total in (1000, 65536)]
    bench = [{s: 1 << round(24 / k) for s in symbols}]
    return check, bench


BENCH_ELEMENTS = 1 << 24  # the placeholder bench size's largest buffer, in elements (64 MiB of float)
CHECK_ELEMENTS = 1 << 20  # ... a placeholder check size's (the reference runs on the host)


def _fit_bench(table: str, kernel: str, bench: list[dict[str, int]], limit: int = BENCH_ELEMENTS,
               odd: bool = False) -> list[dict[str, int]]:
    """``bench`` with its largest size symbol halved, one at a time (``odd``: then made odd, as check sizes are), until the spec
    ``table``'s largest buffer holds at most ``limit`` elements (a buffer of shape ``[N, N]`` or ``[B, N, N]`` grows
    faster than the product of the symbols that :func:`_placeholder_sizes` assumes); unchanged where the shapes cannot
    be read or already fit."""
    try:
        args = tomllib.loads(table)["kernel"][kernel]["args"]
    except (tomllib.TOMLDecodeError, KeyError, TypeError):
        return bench

    def largest(size: dict[str, int]) -> int:
        most = 0
        for a in args:
            shape = a.get("shape") if isinstance(a, dict) else None
            if not isinstance(shape, list):
                continue
            n = 1
            for d in shape:
                n *= int(evaluate(str(d), size))
            most = max(most, n)
        return most

    out = []
    for size in bench:
        size = dict(size)
        try:
            while largest(size) > limit and any(v > 1 for v in size.values()):
                top = max(size, key=lambda k: size[k])  # one symbol at a time, the largest first
                size = {**size, top: max(1, (size[top] // 2) | odd)}
        except (ExprError, ValueError, TypeError, ZeroDivisionError):
            pass
        out.append(size)
    return out


def _toml(value) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def scaffold_kernel(source: str, kernel: str, source_name: str = "<source>") -> Scaffold:
    """Scaffold the ``[kernel.NAME]`` tables of ``kernel`` from ``source`` (CUDA C++ text).

    ``source_name`` only appears in comments (``from k<<<...>>> at rmsnorm.cu:42``).

    Raises:
        ScaffoldError: ``source`` has no ``__global__`` function called ``kernel``.

    A PTX module's ``.entry`` is scaffolded by :func:`ptxfactory.harness.ptx_scaffold.scaffold_entry`.
    """
    from .ptx import is_ptx

    if is_ptx(source):
        from .ptx_scaffold import scaffold_entry

        return scaffold_entry(source, kernel, source_name)
    try:
        kdef = find_kernel(source, kernel)
    except KeyError as exc:
        raise ScaffoldError(exc.args[0]) from None
    root = _parser().parse(source.encode()).root_node
    knode = _kernel_node(root, kdef)
    body = knode.child_by_field_name("body") if knode is not None else None
    todos: list[str] = []
    lines: list[str] = []

    # template parameters first: a parameter of type T gets T's dtype
    template = _template(root, knode) if knode is not None else []
    types: dict[str, str] = {}

    # size symbols: integer scalars named like sizes
    symbols: dict[str, str] = {}
    for p in kdef.params:
        dtype = _DTYPE_OF.get(p.type) or _NEAREST.get(p.type)
        if not p.is_pointer and dtype in _INT_DTYPES and (is_size_name(p.name) or used_as_extent(body, p.name)):
            symbols[p.name] = p.name
    site = _launch_site(root, kdef, knode) if knode is not None else None
    if site is not None:  # an integer the launch configuration is computed from (a grid of OC channels) is a size
        in_config = _launch_config_names(root, site)
        for p, a in zip(kdef.params, site.args):
            dtype = _DTYPE_OF.get(p.type) or _NEAREST.get(p.type)
            if not p.is_pointer and dtype in _INT_DTYPES and a.type == "identifier" and _text(a) in in_config:
                symbols.setdefault(p.name, p.name)
    constants = _launcher_constants(root, kdef, knode, source_name, site) if site is not None else {}
    # a size-like parameter the launcher fixes while its caller gives the sizes (a stride, a window: not in main's
    # `int w = 1000, h = 300;`, which are the sizes of one test)
    given = site is not None and any(p.name in symbols and a.type == "identifier" and _text(a) in site.params
                                     for p, a in zip(kdef.params, site.args))
    fixed = {n: str(v) for n, (v, _) in constants.items() if n in symbols} if given else {}
    constants = {n: c for n, c in constants.items() if n not in symbols or n in fixed}
    symbols.update(fixed)
    derived = _derived_sizes(root, kdef, knode, symbols, types, site) if site is not None else {}
    derived.update(fixed)
    symbols.update(derived)
    synthetic = not symbols
    symbol_list = [v for k, v in symbols.items() if k not in derived] or ["N"]

    two_d = body is not None and bool(re.search(r"\b(?:threadIdx|blockIdx)\s*\.\s*y\b", _text(body)))
    launch = _find_launch(root, kdef, knode, symbols, types, source_name, two_d) if knode is not None else None
    template_values: dict[str, str] = {}
    call_args = launch.template_args if launch is not None and launch.template_args else []
    template_notes = []
    for i, (name, kind, default) in enumerate(template):
        from_call = call_args[i] if i < len(call_args) else None
        value = from_call if from_call is not None and _TOKEN.fullmatch(from_call) else default
        source_of = "the launch" if from_call is not None and value == from_call else "its default" if value == default and value else None
        if value is None or not _TOKEN.fullmatch(value):
            value = "float" if kind == "type" else ("256" if re.search(r"(?i)block|thread", name) else "1")
            source_of = None
        template_values[name] = value
        template_notes.append(f"{name} from {source_of}" if source_of else f"{name} = {value} is a placeholder")
    types = dict(template_values)
    if launch is not None and types:
        # sizeof(T) in the launch: read it again now that T is known
        launch = _find_launch(root, kdef, knode, symbols, types, source_name, two_d)
    if launch is None and body is not None:
        launch = _guard_launch(body, symbols, kernel)
    if launch is None:
        launch = _default_launch(symbol_list, f"no {kernel}<<<...>>> in this file", two_d)

    # the mean length of the ranges an offsets buffer's values start (CSR row pointers): a size of the spec's own
    mean = _fresh("L", {p.name for p in kdef.params} | set(symbol_list))
    ranges, reached, bounded = _reach(root, body, kdef, symbols, launch, types, mean)
    constraints = _assumed_constraints(ranges, symbol_list)
    offsets_init, longest = _offsets_init(mean)
    size_list = symbol_list + [mean] * bool(bounded)
    check_sizes, bench_sizes = _placeholder_sizes(size_list)
    out_dtypes: list[Dtype] = []
    float_atomics: list[str] = []  # "name (file:line)" of the float buffers updated by order-dependent atomics
    byte_buffers = {p.name for p in kdef.params if p.is_pointer and (_DTYPE_OF.get(types.get(p.type, p.type)) in (Dtype.u8, Dtype.i8))}
    float_scalars = 0
    guard_index, guard_bounds = _guard_bounds(body, symbols) if body is not None else ({}, {})
    arg_lines: list[tuple[str, str | None]] = []
    guesses: list[str] = []  # the keys that are guesses (args.x.shape, launch), for the file's header
    for p in kdef.params:
        ctype = types.get(p.type, p.type)
        dtype = _DTYPE_OF.get(ctype)
        notes: list[str] = []
        todo: list[str] = []
        if dtype is None:
            dtype = _NEAREST.get(ctype) or (Dtype.bf16 if "bfloat" in ctype else Dtype.f16 if "half" in ctype else
                                           Dtype.f32 if "float" in ctype else Dtype.i64 if "64" in ctype else Dtype.i32)
            todo.append(f"dtype: {p.type} has no spec dtype; {dtype.value} is the nearest")
        elif ctype != p.type:
            notes.append(f"{p.type} = {ctype}")
        entry: dict = {"name": p.name}
        if p.is_pointer:
            if p.is_const:
                role = "in"
                notes.append(f"const {p.type}*")
            else:
                reads, writes, unknown = _uses(body, p.name)
                if unknown:
                    line, what = unknown[0]
                    role = "inout" if reads or writes or what == "address taken" else "out"
                    todo.append(f"role: {what} at {source_name}:{line}; {role} is a guess")
                elif reads and writes:
                    role = "inout"
                    notes.append(f"{p.type}*: read ({source_name}:{reads[0]}) and written ({source_name}:{writes[0]})")
                elif writes:
                    role = "out"
                    notes.append(f"{p.type}*: written, never read")
                elif reads:
                    role = "in"
                    notes.append(f"{p.type}*: only read (it could be const)")
                else:
                    role = "out"
                    todo.append("role: the kernel never uses it")
            entry |= {"role": role, "dtype": dtype.value, "shape": list(symbol_list)}
            atomic_line = _float_atomic_line(body, p.name) if dtype.is_float and role != "in" else None
            if atomic_line is not None:
                float_atomics.append(f"{p.name} ({source_name}:{atomic_line})")
            extent = _fixed_extent(body, p.name, byte_buffers)
            reach = _reached_shape(reached.get(p.name), symbol_list, source_name, starts=p.name in bounded)
            if extent is not None:
                entry["shape"] = [extent[0]]
                notes.insert(0, f"shape [{extent[0]}]: {extent[1]}")
            elif reach is not None and reach[0] is not None and not reach[2]:
                entry["shape"] = reach[0]
                notes.insert(0, reach[1])
            elif (shape := _thread_extent(body, p.name, guard_index, guard_bounds)) is not None:
                entry["shape"] = shape  # (the guard's product in its written order: a flat index's likelier dimensions)
                digits = _digit_order(body, guard_index, shape, symbols) if len(shape) > 1 else None
                what = f"shape [{', '.join(shape)}]: one element per thread below the guard ({guard_bounds['x']}), " \
                       "every use indexed by the thread's index"
                if digits is not None:  # the kernel takes its index apart in this order: the dimensions are read
                    notes.insert(0, f"{what}, taken apart as {digits}")
                else:
                    todo.insert(0, what)
            elif reach is not None and reach[0] is not None:
                entry["shape"] = reach[0]
                todo.insert(0, reach[1])
            else:
                todo.insert(0, "shape (a guess: every size symbol" + (f"; {reach[1]})" if reach is not None else ")"))
            if role in ("in", "inout"):
                if p.name in bounded:
                    entry["init"], cond = offsets_init, bounded[p.name]
                    notes.append(f"init {offsets_init}: its values bound the loop {' '.join(_text(cond).split())} at "
                                 f"{source_name}:{cond.start_point[0] + 1}, the starts of consecutive ranges (each 0 to "
                                 f"{show(longest)} long, {mean} their mean length)")
                elif role == "inout" and (line := _atomic_only_line(body, p.name)) is not None:
                    entry["init"] = "zeros"
                    todo.append(f"init: zeros, as an accumulator that only atomics update starts (atomic at "
                                f"{source_name}:{line}; a launcher's memset); check")
                elif ctype == "bool":
                    entry["init"] = "randint(0, 2)"  # (a bool holds 0 or 1: any other byte is undefined)
                    notes.append("bool: 0 or 1")
                elif dtype in _INT_DTYPES and (indexed := _indexed_init(ranges, p.name, reached, symbol_list, source_name)):
                    entry["init"], why = indexed
                    notes.append(why)
                elif dtype in _INT_DTYPES:
                    if re.search(r"(?i)idx|index|indices|ids?$|token|label|offset", p.name):
                        entry["init"] = f"randint(0, {symbol_list[0]})"
                        todo.append(f"init: legal values of {p.name} (no use of its values as an index could be read; "
                                    f"the first size symbol is a guess)")
                    elif (line := _divisor_line(body, p.name)) is not None:  # a degree, a count: never 0
                        entry["init"] = "randint(1, 100)"
                        todo.append(f"init: legal values of {p.name} (from 1: its values divide at {source_name}:{line})")
                    else:  # every value of a byte, else small non-negative integers
                        entry["init"] = {Dtype.i8: "randint(-128, 128)", Dtype.u8: "randint(0, 256)"}.get(dtype, "randint(0, 100)")
                        todo.append(f"init: legal values of {p.name}")
                else:
                    entry["init"] = "normal"
            else:
                out_dtypes.append(dtype)
        else:
            entry |= {"role": "scalar", "dtype": dtype.value}
            if p.name in constants:
                entry["value"] = constants[p.name][0]
                notes.append(f"the launcher's constant ({constants[p.name][1]})")
            elif p.name in symbols:
                entry["value"] = symbols[p.name]
                notes.append(f"from the launcher: {symbols[p.name]}" if p.name in derived else "size symbol")
            elif dtype.is_float:
                if "eps" in p.name.lower():
                    entry["value"] = 1e-5
                else:
                    entry["value"] = _FLOAT_SCALAR_VALUES[float_scalars % len(_FLOAT_SCALAR_VALUES)]
                    float_scalars += 1
                todo.append(f"value of {p.name}")
            else:
                entry["value"] = 1
                todo.append(f"value of {p.name} (a number, or an expression over {', '.join(symbol_list)})")
        comment = "; ".join(([f"TODO {'; '.join(todo)}"] if todo else []) + notes)
        if derived and isinstance(entry.get("shape"), list):  # a derived size read from the kernel: its expression
            entry["shape"] = [re.sub(r"\b(\w+)\b", lambda m: derived.get(m.group(1), m.group(1)), d) if isinstance(d, str)
                              else d for d in entry["shape"]]
            entry["shape"] = [int(d) if isinstance(d, str) and d.isdigit() else d for d in entry["shape"]]
        arg_lines.append((f"  {_toml(entry)},", comment or None))
        guesses += guessed_keys(p.name, todo)

    tol = 1e-2 if any(d in (Dtype.bf16, Dtype.f16) for d in out_dtypes) else 0 if out_dtypes and all(
        d in _INT_DTYPES for d in out_dtypes) else 1e-8 if out_dtypes and all(d == Dtype.f64 for d in out_dtypes) else 1e-3

    broken = _first_syntax_error(knode if knode is not None else root)
    mean_todo = _mean_todo(mean, list(bounded), reached) if bounded else None
    warnings = unset_constants(source, kernel, source_name)

    def build(launch: _Launch) -> tuple[str, list[tuple[int, str]]]:
        out: list[tuple[str, str | None]] = []
        out.append((f"[kernel.{kernel}]", None))
        if broken is not None:
            out.append(("", f"TODO the kernel does not parse at {source_name}:{broken} (a syntax error?): what this spec read "
                            "from it (roles, launch) may be wrong, and optimise will not compile it as it is"))
        out += [("", f"warning: {w}") for w in warnings]
        out.append(('arch = "sm_90a"', "the GPU's arch (sm_90a: H100, H200)"))
        out.append(("args = [", "signature order; checked against the source"))
        out += arg_lines
        out.append(("]", None))
        if synthetic:
            out.append(("", "TODO sizes: the kernel takes no size argument; N is a placeholder for its buffers' length"))
        if launch.todo:
            out.append(("", f"TODO {launch.todo}"))
        elif launch.comment:
            out.append(("", f"the original launch, {launch.comment}"))
        if constraints:
            out.append((f"constraints = {_toml(constraints)}", "TODO assumed: the kernel divides by these (its output "
                        "extents); a size where one is below 1 is none it can run at"))
        out.append(("", '"free" lets candidates choose their own launch (the report says which); "fixed" keeps this one'))
        lt = {"grid": launch.grid, "block": launch.block, "shared_mem": launch.shared_mem, "policy": "free"}
        out.append((f"launch = {_toml(lt)}", None))
        out.append(("", None))
        out.append((f"[kernel.{kernel}.check]", None))
        out.append(('reference = "kernel"', "the original source is the oracle"))
        out.append((f"rtol = {tol}", "TODO tolerances: how far a candidate may differ from the original"))
        out.append((f"atol = {tol}", None))
        out.append(("seeds = 3", None))
        if float_atomics:
            out.append(("deterministic = false", f"float atomics on {', '.join(float_atomics)}: the additions' order, and so "
                         "the last bits, varies from run to run; each run is judged by the tolerances"))
        out.append(("", "TODO sizes: placeholders; list the sizes the kernel must be correct at (odd ones, tails, one row)"))
        if mean_todo:
            out.append(("", mean_todo))
        out.append((f"sizes = {_toml(check_sizes)}", None))
        out.append(("", None))
        out.append((f"[kernel.{kernel}.bench]", None))
        out.append(('metric = "geomean_time"', None))
        out.append(("", "TODO sizes: placeholders; list the sizes you want faster"))
        out.append((f"sizes = {_toml(bench_sizes)}", None))
        if template:
            out.append(("", None))
            out.append((f"[kernel.{kernel}.tune]", None))
            out.append(("", f"TODO template: the instantiations to try, the first is the original's ({'; '.join(template_notes)})"))
            out.append((f"template = {_toml({n: [_num(v)] for n, v in template_values.items()})}", None))
        text_lines, todo_lines = [], []
        for i, (code, comment) in enumerate(out, 1):
            if comment is None:
                text_lines.append(code)
            elif not code:
                text_lines.append(f"# {comment}")
            else:
                text_lines.append(f"{code}  # {comment}")
            if comment and "TODO" in comment:
                todo_lines.append((i, comment[comment.index("TODO"):]))
        return "\n".join(text_lines) + "\n", todo_lines

    table, todo_lines = build(launch)
    fitted = _fit_bench(table, kernel, bench_sizes), _fit_bench(table, kernel, check_sizes, CHECK_ELEMENTS, odd=True)
    if fitted != (bench_sizes, check_sizes):  # (a square [N, N] buffer of one size symbol: 2**24 rows of 2**24)
        bench_sizes, check_sizes = fitted
        table, todo_lines = build(launch)
    try:
        parse_spec(table, f"{source_name}.toml")
    except SpecError:
        check_sizes, bench_sizes = _placeholder_sizes(size_list, square=True)  # (a derived extent may need them alike)
        first = build(launch)[0]
        bench_sizes, check_sizes = _fit_bench(first, kernel, bench_sizes), _fit_bench(first, kernel, check_sizes, CHECK_ELEMENTS, odd=True)
        table, todo_lines = build(launch)
    if constraints:  # assumptions only: placeholder sizes that break one lose them, not the spec
        try:
            parse_spec(table, f"{source_name}.toml")
        except SpecError:
            constraints = []
            table, todo_lines = build(launch)
    try:
        parse_spec(table, f"{source_name}.toml")
    except SpecError as exc:
        if launch.where is None:
            raise ScaffoldError(f"cannot scaffold a spec for {kernel!r} (please report it): {exc}") from None
        fallback = _default_launch(symbol_list, f"{launch.comment.removeprefix('from ')} does not fit the placeholder sizes ({exc.message})", two_d)
        table, todo_lines = build(fallback)
        launch = fallback
        try:
            parse_spec(table, f"{source_name}.toml")
        except SpecError as exc2:
            raise ScaffoldError(f"cannot scaffold a spec for {kernel!r} (please report it): {exc2}") from None
    guesses += ["the source (it does not parse)"] * (broken is not None) + ["sizes (N)"] * synthetic
    if launch.todo:
        guesses.append(launch.todo.split(":")[0])
    if any("placeholder" in n for n in template_notes):
        guesses.append("tune.template")
    return Scaffold(kernel=kernel, table=table, todos=tuple(todo_lines), launch_from=launch.where,
                    guesses=tuple(guesses), warnings=tuple(warnings))


def _first_syntax_error(node: ts.Node) -> int | None:
    """The line (1-based) of the first node tree-sitter could not parse (an ERROR, or a token it had to assume), or None."""
    if not node.has_error:
        return None
    for n in _walk(node):
        if n.type == "ERROR" or n.is_missing:
            return n.start_point[0] + 1
    return node.start_point[0] + 1


_GUESSED = ("shape", "init", "role", "dtype", "value")


def guessed_keys(name: str, todo: Sequence[str]) -> list[str]:
    """The keys of argument ``name`` that its TODO items (``shape ...``, ``init: ...``, ``value of ...``) mark as
    guesses: ``args.NAME.shape``, ... (an item about anything else is about its role)."""
    keys = [t.split()[0].rstrip(":") for t in todo]
    return list(dict.fromkeys(f"args.{name}.{k if k in _GUESSED else 'role'}" for k in keys))


def _header(source_name: str, scaffolds: Sequence[Scaffold]) -> str:
    """The comment a new spec file starts with: it runs as written only where no key is a guess (:attr:`Scaffold.
    guesses`); else which keys of which kernel are; and a pointer to the warnings, where there are any."""
    head = (f"Spec for {source_name}, scaffolded by `ptxfactory init` from the kernel's source. See README.md, "
            "\"The spec format\". ")
    guessed = "; ".join(f"[kernel.{s.kernel}] {', '.join(s.guesses)}" for s in scaffolds if s.guesses)
    if guessed:
        head += (f"It loads as written, but these keys are guesses, and until they are checked the kernel may read or "
                 f"write past its buffers or compute something else: {guessed}. Every TODO marks a guess or a "
                 "placeholder to check.")
    else:
        head += ("It loads and runs as written: the shapes, value ranges and launch were read from the source; every "
                 "TODO marks a placeholder to check (sizes, tolerances).")
    if any(s.warnings for s in scaffolds):
        head += " Each warning below says what the tool runs otherwise than your program does."
    return "".join(f"# {line}\n" for line in textwrap.wrap(head, 110, break_on_hyphens=False))


def described_in(text: str) -> set[str]:
    """The kernels an existing spec text has tables for.

    Raises:
        ScaffoldError: the text is not TOML (the message gives the line).
    """
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScaffoldError(f"not valid TOML ({exc}): fix it first; nothing was written") from None
    tables = raw.get("kernel")
    return set(tables) if isinstance(tables, dict) else set()


def plan_spec(source: str, source_path: str | Path, kernels: Sequence[str] | None = None,
              existing: str | None = None) -> SpecAddition:
    """What to write for ``kernels`` (default: every kernel of ``source`` the spec lacks).

    ``existing``: the current text of ``FILE.toml`` (None: there is none). With none, the addition creates
    the file; with one, it appends the new tables after what is there, which it never changes.

    Raises:
        ScaffoldError: a kernel is not in ``source``, every requested kernel already has a table, or
            ``existing`` is not TOML. Messages name the spec file.
    """
    path = spec_path_for(source_path)
    name = Path(source_path).name
    have: set[str] = set()
    if existing is not None:
        try:
            have = described_in(existing)
        except ScaffoldError as exc:
            raise ScaffoldError(f"{path.name}: {exc}") from None
    if kernels:
        wanted = list(dict.fromkeys(kernels))
        already = [k for k in wanted if k in have]
        if already:
            raise ScaffoldError(f"{path.name} already has [kernel.{already[0]}]: nothing was written (edit that table, "
                                "or delete it to scaffold it again)")
    else:
        found = [k.name for k in find_kernels(source)]
        if not found:
            raise ScaffoldError(f"{name} has no __global__ kernel")
        wanted = [k for k in found if k not in have]
        if not wanted:
            raise ScaffoldError(f"{path.name} already describes every kernel of {name} ({', '.join(found)}): nothing was written")
    scaffolds = [scaffold_kernel(source, k, name) for k in wanted]
    if existing is None:
        text = _header(name, scaffolds)
        offset = text.count("\n")
    else:
        text = "" if not existing or existing.endswith("\n") else "\n"
        text += "\n"
        offset = (existing + text).count("\n")
    todos = []
    for i, s in enumerate(scaffolds):
        if i:
            text += "\n"
            offset += 1
        todos += [(offset + line, msg) for line, msg in s.todos]
        text += s.table
        offset += s.table.count("\n")
    whole = text if existing is None else existing + text
    described_in(whole)  # the result is TOML (a bug if not)
    return SpecAddition(path=path, text=text, create=existing is None, kernels=tuple(wanted), todos=tuple(todos),
                        warnings=tuple(w for s in scaffolds for w in s.warnings))


def read_spec_text(path: str | Path) -> str | None:
    """The text of a spec file, None when there is none.

    Raises:
        ScaffoldError: it exists but cannot be read.
    """
    try:
        return Path(path).read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScaffoldError(f"{path}: cannot read it ({exc}): nothing was written") from None


def write_spec(addition: SpecAddition) -> None:
    """Create the spec file (exclusively: never over a file that appeared meanwhile) or append to it.

    Raises:
        ScaffoldError: the file to create exists by now; OSError for other file system errors.
    """
    if addition.create:
        try:
            with open(addition.path, "x") as f:
                f.write(addition.text)
        except FileExistsError:
            raise ScaffoldError(f"{addition.path} appeared meanwhile: nothing was written; run init again") from None
    else:
        with open(addition.path, "a") as f:
            f.write(addition.text)


def init_spec(source_path: str | Path, kernels: Sequence[str] | None = None) -> SpecAddition:
    """``ptxfactory init``: scaffold ``FILE.toml`` beside ``source_path`` for ``kernels`` (default: every kernel
    of the file that the spec lacks) and write it; returns what was written.

    Raises:
        ScaffoldError: the source cannot be read, a kernel is missing or already described, or the existing
            spec is not TOML; nothing is written then.
    """
    source_path = Path(source_path)
    try:
        source = source_path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ScaffoldError(f"cannot read {source_path}: {getattr(exc, 'strerror', None) or exc}") from None
    addition = plan_spec(source, source_path, kernels, read_spec_text(spec_path_for(source_path)))
    write_spec(addition)
    return addition
