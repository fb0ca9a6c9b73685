"""Canonical rewrite: every local a kernel declares more than once gets a name of its own.

Naive kernels declare the same local again in sibling loops and blocks (``for (int d = 0; ...)`` twice, ``float v``
in two passes over a row). Many passes read locals by name and refuse such a kernel ("d declared more than once":
``vectorize_x``, ``unflatten``, ``grid_stride``; ``rowpar`` and ``collapse`` read a local's type only where it is
declared once). Here each declaration after a name's first (in source order, the function's parameters first) is
renamed ``NAME_2``, ``NAME_3``, ... (a name no identifier of the text already has), with every use that refers to it
under C++'s scope rules: a declaration is seen from its declarator to the end of its block (a ``for``/``if``/
``while``/``switch`` statement's own declarations, to the end of that statement), an inner one hides an outer one
until its block ends. Exact: only names change.

Left as written: a kernel holding ``goto`` or labels, a lambda, a local class or struct, or a ``using``/``typedef``
(where a scope's reach is not the block's); one where a name declared twice is also declared ``extern`` or as a
function in the body, or initialised directly (``float v(s);``, which the parser reads as a function declaration),
or appears in a preprocessor line (``#pragma unroll u``). A use the parser reads as a type name (``get<u>()``, a
template argument inside ``ns::f<u>``) is renamed like any other; parameters of a function type (``float (*op)(int
n)``) declare nothing in the kernel's scope. A new name avoids every identifier of the kernel's text (not the
file's other macros: a ``#define d_2`` the kernel never mentions would collide).
"""
from __future__ import annotations

import re

from . import syntax as sx
from .syntax import Node

SCOPES = ("compound_statement", "for_statement", "for_range_loop", "if_statement", "while_statement",
          "switch_statement", "do_statement")
REFUSE = ("goto_statement", "labeled_statement", "lambda_expression", "struct_specifier", "class_specifier",
          "union_specifier", "alias_declaration", "type_definition")


def _names(node: Node) -> set[str]:
    """The names ``node`` mentions (tree-sitter reads some uses as type names: ``get<u>()``, ``float v(s);``)."""
    return {sx.text(i) for i in sx.walk(node) if i.type in ("identifier", "type_identifier")}


def unique_locals(data: bytes, fn: Node | None) -> bytes:
    """``data`` (a kernel definition's text whose parsed ``function_definition`` is ``fn``) with each local declared
    more than once renamed apart (module docstring); ``data`` itself where no name is declared twice or the kernel is
    one this leaves as written."""
    if fn is None:
        return data
    counts = sx.declaration_counts(fn)
    twice = {name for name, c in counts.items() if c > 1}
    if not twice or sx.contains_type(fn, REFUSE):
        return data
    body = fn.child_by_field_name("body")
    if body is None:
        return data
    for n in sx.walk(body):
        if n.type == "declaration" and (
                any(c.type == "storage_class_specifier" and sx.text(c) == "extern" for c in n.children)
                or any(c.type == "function_declarator" for c in sx.walk(n))) and _names(n) & twice:
            return data  # extern g; a local function declaration; float v(s); (read as a function declaration)
        if n.type.startswith("preproc") and set(re.findall(r"[A-Za-z_]\w*", sx.text(n))) & twice:
            return data  # #pragma unroll u
    taken = set(re.findall(rb"[A-Za-z_]\w*", data))
    edits: list[tuple[int, int, bytes]] = []
    seen: dict[str, int] = {}
    scopes: list[dict[str, str]] = [{}]

    def fresh(name: str) -> str:
        k = seen[name]
        while f"{name}_{k}".encode() in taken:
            k += 1
        new = f"{name}_{k}"
        taken.add(new.encode())
        return new

    def declare(ident: Node) -> None:
        name = sx.text(ident)
        if name not in twice:
            return
        seen[name] = seen.get(name, 0) + 1
        new = name if seen[name] == 1 else fresh(name)
        scopes[-1][name] = new
        if new != name:
            edits.append((ident.start_byte, ident.end_byte, new.encode()))

    def use(ident: Node) -> None:
        name = sx.text(ident)
        if name not in twice:
            return
        for scope in reversed(scopes):
            if name in scope:
                if scope[name] != name:
                    edits.append((ident.start_byte, ident.end_byte, scope[name].encode()))
                return

    def visit_args(node: Node) -> None:
        for c in node.named_children:
            if c.type == "template_argument_list":
                visit(c)
            elif c.type in ("qualified_identifier", "template_function", "template_type", "template_method"):
                visit_args(c)

    def visit(node: Node) -> None:
        declarators = node.children_by_field_name("declarator") if node.type in ("declaration", "parameter_declaration") else []
        if node.type == "parameter_declaration" and node.parent is not None and node.parent.parent != signature:
            for child in node.children:  # (a function type's parameter: its name is no local of the kernel)
                if child not in declarators:
                    visit(child)
            return
        if node.type in ("declaration", "parameter_declaration"):
            for child in node.children:
                if child.type == "init_declarator" or child in declarators:
                    declarator = child.child_by_field_name("declarator") if child.type == "init_declarator" else child
                    ident = sx.innermost_identifier(declarator) if declarator is not None else None
                    for part in sx.walk(declarator) if declarator is not None else ():
                        if part.type in ("identifier", "type_identifier") and part != ident:
                            use(part)  # (an array's extent: float t[n])
                    if ident is not None:
                        declare(ident)
                    value = child.child_by_field_name("value") if child.type == "init_declarator" else None
                    if value is not None:
                        visit(value)
                elif child.type not in ("primitive_type", "type_identifier", "sized_type_specifier", "type_qualifier",
                                        "storage_class_specifier"):
                    visit(child)
            return
        if node.type in ("identifier", "type_identifier"):
            use(node)
            return
        if node.type == "qualified_identifier":  # std::min: another namespace's name; its template arguments are ours
            visit_args(node)
            return
        if node.type == "field_expression":  # p.x: only the object is a name of ours
            obj = node.child_by_field_name("argument")
            if obj is not None:
                visit(obj)
            return
        opened = node.type in SCOPES
        if opened:
            scopes.append({})
        for child in node.children:
            visit(child)
        if opened:
            scopes.pop()

    signature = sx.function_declarator(fn)
    plist = signature.child_by_field_name("parameters") if signature is not None else None
    for p in (plist.named_children if plist is not None else ()):
        if p.type == "parameter_declaration":
            visit(p)
    visit(body)
    return sx.apply_edits(data, edits) if edits else data
