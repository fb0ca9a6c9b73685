"""The C preprocessor's macros of a CUDA file as tree-sitter-cuda reads them: what the scaffold (:mod:`.scaffold`: a
dimension written ``D`` with ``#define D 64``) and the transform passes (``search/generators/transform/expand.py``, which
expands them and re-exports these) both read.

- :func:`tokens`: C tokens of a macro body or a kernel's text, a preprocessor line one ``directive`` token;
- :func:`file_macros`: the macros in scope at a kernel (defined before it), each with the ``problem`` that keeps it from
  being expanded (``#undef``'d, defined twice, under ``#if``, variadic, ``#``/``##``, unbalanced brackets);
- :func:`integer_constants`: those whose body is one integer literal (``#define K 7``), a loop's trip count or a
  buffer's dimension.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .cexpr import Node, text, walk

_TOKEN = re.compile(
    r"""(?P<ws>\s+)
      | (?P<comment>//[^\n]*|/\*.*?\*/)
      | (?P<string>[uUL]?(?:"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'))
      | (?P<ident>[A-Za-z_]\w*)
      | (?P<number>\.?\d(?:[eEpP][+-]|[\w.])*)
      | (?P<punct>\#\#|.)""",
    re.X | re.S,
)


@dataclass
class Macro:
    """One ``#define``: ``params`` None for an object-like macro; ``problem``: why it cannot be expanded, else None."""

    name: str
    params: list[str] | None  # None: object-like
    body: str
    problem: str | None = None  # why it cannot be expanded


def tokens(text: str) -> list[tuple[str, str]]:
    """``(kind, text)`` tokens; a preprocessor line (``#pragma unroll``) is one ``directive`` token."""
    out, pos, n = [], 0, len(text)
    while pos < n:
        line_start = text.rfind("\n", 0, pos) + 1
        if text[pos] == "#" and text[line_start:pos].strip() == "":
            end = pos
            while True:
                nl = text.find("\n", end)
                if nl < 0:
                    end = n
                    break
                if text[nl - 1] == "\\":
                    end = nl + 1
                    continue
                end = nl
                break
            out.append(("directive", text[pos:end]))
            pos = end
            continue
        m = _TOKEN.match(text, pos)
        out.append((m.lastgroup, m.group()))
        pos = m.end()
    return out


def _balanced(toks: list[tuple[str, str]]) -> bool:
    """Whether the brackets of ``toks`` pair up."""
    pairs, stack = {")": "(", "]": "[", "}": "{"}, []
    for kind, t in toks:
        if kind != "punct":
            continue
        if t in "([{":
            stack.append(t)
        elif t in pairs:
            if not stack or stack.pop() != pairs[t]:
                return False
    return not stack


def _clean_body(raw: str) -> str:
    """A macro's body on one line (its continuations joined)."""
    return re.sub(r"\\\r?\n", " ", raw).strip()


def file_macros(root: Node, kernel_start: int, kernel_end: int) -> dict[str, Macro]:
    """The file's macros in scope at the kernel (defined before it), with a ``problem`` for those not expandable."""
    out: dict[str, Macro] = {}
    seen: dict[str, int] = {}
    for n in walk(root):
        if n.type == "preproc_call" and text(n.child_by_field_name("directive")).strip() == "#undef":
            arg = n.child_by_field_name("argument")
            name = text(arg).strip() if arg is not None else ""
            if name and n.start_byte < kernel_end:
                old = out.get(name)
                out[name] = Macro(name, old.params if old else None, old.body if old else "", "#undef'd in the file")
            continue
        if n.type not in ("preproc_function_def", "preproc_def"):
            continue
        name = text(n.child_by_field_name("name"))
        if n.start_byte >= kernel_end:
            continue
        seen[name] = seen.get(name, 0) + 1
        value = n.child_by_field_name("value")
        body = _clean_body(text(value)) if value is not None else ""
        params = None
        if n.type == "preproc_function_def":
            pnode = n.child_by_field_name("parameters")
            params = [text(c) for c in pnode.named_children] if pnode is not None else []
            if pnode is not None and "..." in text(pnode):
                params.append("...")
        m = Macro(name, params, body)
        toks = [t for t in tokens(body) if t[0] not in ("ws", "comment")]
        if n.start_byte >= kernel_start:
            m.problem = "defined inside the kernel"
        elif seen[name] > 1:
            m.problem = "defined more than once"
        elif any(a.type in ("preproc_if", "preproc_ifdef", "preproc_else", "preproc_elif")
                 and not a.start_byte <= kernel_start < a.end_byte for a in ancestors(n)):  # (a guard around both: fine)
            m.problem = "defined under #if"
        elif params is not None and ("..." in params or "__VA_ARGS__" in body):
            m.problem = "variadic"
        elif any(t[1] in ("#", "##") or t[0] == "directive" for t in toks):
            m.problem = "uses # or ##"
        elif not _balanced(toks):
            m.problem = "its body's brackets are not balanced"
        out[name] = m
    return out


def ancestors(n: Node):
    """The nodes around ``n``, innermost first."""
    p = n.parent
    while p is not None:
        yield p
        p = p.parent


def integer_constants(root: Node, kernel_start: int, kernel_end: int) -> dict[str, int]:
    """The object-like macros in scope at the kernel (bytes ``kernel_start`` to ``kernel_end`` of the file whose tree
    is ``root``) whose body is one integer literal (``#define K 7`` -> ``{"K": 7}``): what a pass needs to know a
    loop's trip count, and the scaffold a buffer's dimension (``q[i * D + d]``, ``d < D``)."""
    out = {}
    for name, m in file_macros(root, kernel_start, kernel_end).items():
        body = m.body.strip().rstrip("uUlL")
        if m.params is None and m.problem is None and body.isdigit():
            out[name] = int(body)
    return out
