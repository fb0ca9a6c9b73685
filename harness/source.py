"""Find ``__global__`` kernels in CUDA source with tree-sitter-cuda, and check them against a spec."""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import tree_sitter as ts
import tree_sitter_cuda

from ptxfactory.protocol.spec import KernelSpec


@dataclass(frozen=True)
class Param:
    """One kernel parameter as written: ``type`` is the base type (``__nv_bfloat16``), ``is_pointer`` for ``T*``."""

    name: str
    type: str
    is_pointer: bool
    is_const: bool


@dataclass(frozen=True)
class KernelDef:
    """A ``__global__`` function definition; byte offsets and 0-based lines cover ``extern "C"`` and templates too."""

    name: str
    params: tuple[Param, ...]
    start_byte: int
    end_byte: int
    start_line: int
    end_line: int
    name_line: int
    text: str
    template_params: tuple[str, ...] = ()  # a kernel template's parameter names, in order
    template_types: tuple[str, ...] = ()  # which of them are type parameters (``typename T``, ``class U``)
    language: str = "cuda"  # "ptx" for an ``.entry`` of a PTX module (harness/ptx.py)


class SignatureMismatch(ValueError):
    """The spec's arguments do not match the kernel's parameters; the message names the argument.

    ``key``: the spec key to fix, relative to ``kernel.NAME`` (``args[0].dtype``, ``tune.template.T``), or ''."""

    def __init__(self, message: str, key: str = ""):
        super().__init__(message)
        self.key = key


@lru_cache(maxsize=1)
def _parser() -> ts.Parser:
    return ts.Parser(ts.Language(tree_sitter_cuda.language()))


def find_kernels(source: str) -> list[KernelDef]:
    """All ``__global__`` function definitions in ``source``, in file order (a PTX module's ``.entry`` functions:
    :func:`ptxfactory.harness.ptx.kernel_defs`)."""
    from .ptx import is_ptx, kernel_defs

    if is_ptx(source):
        return kernel_defs(source)
    data = source.encode()
    tree = _parser().parse(data)
    kernels = []
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        if node.type == "function_definition" and any(c.type == "__global__" for c in node.children):
            outer = node
            template: tuple[str, ...] = ()
            types: tuple[str, ...] = ()
            while outer.parent is not None and outer.parent.type in ("linkage_specification", "template_declaration"):
                outer = outer.parent
                if outer.type == "template_declaration":
                    template = _template_params(outer)
                    types = _template_types(outer)
            decl = node.child_by_field_name("declarator")
            while decl is not None and decl.type != "function_declarator":
                decl = decl.child_by_field_name("declarator")
            if decl is None:
                continue
            name_node = decl.child_by_field_name("declarator")
            params = tuple(_param(p) for p in decl.child_by_field_name("parameters").named_children if p.type == "parameter_declaration")
            kernels.append(
                KernelDef(
                    name=name_node.text.decode(),
                    params=params,
                    start_byte=outer.start_byte,
                    end_byte=outer.end_byte,
                    start_line=outer.start_point[0],
                    end_line=outer.end_point[0],
                    name_line=name_node.start_point[0],
                    text=data[outer.start_byte : outer.end_byte].decode(),
                    template_params=template,
                    template_types=types,
                )
            )
            continue
        stack.extend(reversed(node.children))
    kernels.sort(key=lambda k: k.start_byte)
    return kernels


def find_kernel(source: str, name: str) -> KernelDef:
    """The kernel called ``name``. Raises ``KeyError`` listing the kernels that exist."""
    kernels = find_kernels(source)
    for k in kernels:
        if k.name == name:
            return k
    raise KeyError(f"no __global__ kernel named {name!r} (found: {', '.join(k.name for k in kernels) or 'none'})")


def _param(node: ts.Node) -> Param:
    base = node.child_by_field_name("type")
    decl = node.child_by_field_name("declarator")
    is_pointer = False
    is_const = any(c.type == "type_qualifier" and c.text == b"const" for c in node.children)
    while decl is not None and decl.type in ("pointer_declarator", "reference_declarator", "array_declarator"):
        is_pointer = is_pointer or decl.type != "reference_declarator"
        decl = decl.child_by_field_name("declarator") or next((c for c in decl.named_children if c.type == "identifier"), None)
    name = decl.text.decode() if decl is not None else ""
    type_text = " ".join(base.text.decode().split()) if base is not None else ""
    return Param(name=name, type=type_text, is_pointer=is_pointer, is_const=is_const)


def _template_params(node: ts.Node) -> tuple[str, ...]:
    """The names in a ``template_declaration``'s parameter list (``template <int TILE, Layout L, typename T>``:
    TILE, L, T): a value parameter's declarator, a type parameter's own name; ``?`` where there is none."""
    plist = node.child_by_field_name("parameters")
    names = []
    for p in plist.named_children if plist is not None else ():
        name = p.child_by_field_name("declarator") or p.child_by_field_name("name")
        if name is None:  # typename T / class T: the type_identifier is a plain child
            name = next((c for c in p.named_children if c.type == "type_identifier"), None)
        while name is not None and name.type not in ("identifier", "type_identifier"):  # int... Ns, T&&
            name = next((c for c in name.named_children if c.type in ("identifier", "type_identifier")), None) or (
                name.named_children[0] if name.named_children else None)
        names.append(name.text.decode() if name is not None else "?")
    return tuple(names)


_TYPE_PARAMETERS = ("type_parameter_declaration", "optional_type_parameter_declaration", "variadic_type_parameter_declaration")


def _template_types(node: ts.Node) -> tuple[str, ...]:
    """The type parameters (``typename T``, ``class U = float``) of a ``template_declaration``, by name."""
    plist = node.child_by_field_name("parameters")
    return tuple(next((c.text.decode() for c in p.named_children if c.type == "type_identifier"), "?")
                 for p in (plist.named_children if plist is not None else ()) if p.type in _TYPE_PARAMETERS)


def _plain_type(type_text: str) -> str:
    """A parameter's type as the dtypes spell it: ``std::int32_t`` and ``cuda::std::uint32_t`` are ``int32_t``."""
    for prefix in ("::", "cuda::std::", "std::"):
        type_text = type_text.removeprefix(prefix)
    return type_text


def check_signature(spec: KernelSpec, kernel: KernelDef) -> None:
    """Check the spec's ``args`` against the kernel's parameters: count, order, names, pointer vs scalar, dtype;
    and a kernel template's parameters against the spec's ``tune.template`` knobs (all of them, in order).

    A parameter whose type is a template type parameter (``const T* x`` in ``template <typename T, int VEC>``)
    is checked as instantiated: with every value ``tune.template`` gives ``T`` (``T = ["float"]``), since
    the ``tune`` generator may compile any of them.

    Raises:
        SignatureMismatch: naming the first argument (or template parameter) that differs, with the spec
            key to fix (``args[0].dtype``, or ``tune.template.T`` when a type parameter's value is the cause).
    """
    if kernel.language == "ptx":
        from .ptx import check_entry_signature

        return check_entry_signature(spec, kernel)
    knobs = tuple(spec.tune.template)
    if knobs != kernel.template_params:
        if not kernel.template_params:
            raise SignatureMismatch(f"tune.template sets {', '.join(knobs)} but kernel {kernel.name!r} is not a template", key="tune.template")
        raise SignatureMismatch(
            f"kernel {kernel.name!r} is a template of <{', '.join(kernel.template_params)}>: "
            f"tune.template must give values for each, in that order (it gives: {', '.join(knobs) or 'none'})",
            key="tune.template" if knobs else "tune",
        )
    params = kernel.params
    if len(params) != len(spec.args):
        raise SignatureMismatch(
            f"kernel {kernel.name!r} has {len(params)} parameters ({', '.join(p.name for p in params)}) "
            f"but the spec lists {len(spec.args)} args ({', '.join(a.name for a in spec.args)})",
            key="args",
        )
    for i, (arg, p) in enumerate(zip(spec.args, params)):
        where = f"args[{i}] ({arg.name!r})"
        if arg.name != p.name:
            raise SignatureMismatch(f"{where}: the kernel's parameter {i} is named {p.name!r}", key=f"args[{i}].name")
        if arg.is_buffer and not p.is_pointer:
            raise SignatureMismatch(f"{where}: role {arg.role!r} needs a pointer, the kernel takes {p.type} {p.name}", key=f"args[{i}].role")
        if not arg.is_buffer and p.is_pointer:
            raise SignatureMismatch(f"{where}: role 'scalar' but the kernel takes a pointer {p.type}* {p.name}", key=f"args[{i}].role")
        declared = _plain_type(p.type)
        if declared in kernel.template_types:
            for value in spec.tune.template.get(declared, []):
                if _plain_type(str(value)) not in arg.dtype.c_types:
                    raise SignatureMismatch(
                        f"{where}: dtype {arg.dtype.value} expects {' or '.join(arg.dtype.c_types)}, the kernel declares "
                        f"{p.type}{'*' if p.is_pointer else ''} {p.name} and tune.template gives {declared} = {value!r}",
                        key=f"tune.template.{declared}")
        elif declared not in arg.dtype.c_types:
            raise SignatureMismatch(f"{where}: dtype {arg.dtype.value} expects {' or '.join(arg.dtype.c_types)}, the kernel declares {p.type}",
                                    key=f"args[{i}].dtype")
        if arg.role == "in" and not p.is_const:
            pass  # allowed: many real kernels omit const on inputs


def replace_kernel(source: str, kernel: KernelDef, new_text: str) -> str:
    """``source`` with the kernel's definition (bytes ``start_byte:end_byte``) replaced by ``new_text``."""
    data = source.encode()
    return (data[: kernel.start_byte] + new_text.encode() + data[kernel.end_byte :]).decode()


def spec_location(spec_path: str | Path, kernel_name: str, key: str) -> str:
    """``FILE:LINE: kernel.NAME.KEY`` for a key of a kernel's table in a spec file (``args[0].dtype``,
    ``tune.template.T``), the line found in the file's text (``FILE: kernel.NAME.KEY`` when it is not found
    or the file cannot be read), for errors that are only found once the kernel is known (a signature mismatch)."""
    from ptxfactory.protocol.spec import _locate  # the spec loader's own key finder

    parts: list[str | int] = ["kernel", kernel_name]
    for m in re.finditer(r"([A-Za-z_]\w*)|\[(\d+)\]", key):
        parts.append(m.group(1) if m.group(1) else int(m.group(2)))
    try:
        line = _locate(Path(spec_path).read_text(), tuple(parts))
    except OSError:
        line = None
    dotted = f"kernel.{kernel_name}.{key}" if key else f"kernel.{kernel_name}"
    return f"{spec_path}:{line}: {dotted}" if line else f"{spec_path}: {dotted}"
