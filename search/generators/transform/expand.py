"""Seeing through the file's own function-like macros and one-line ``__device__`` helpers before any pass runs.

:func:`expand_kernel` returns the kernel's definition with

1. every function-like macro of the file (``#define OUT(r, c) y[(size_t)(r) * N + (c)]``) invoked in it expanded
   the way the C preprocessor does (arguments macro-expanded first, then substituted into the body, the result
   rescanned with the macro itself disabled; bounded depth). The tokens are exactly the compiler's (a space only
   where two tokens would otherwise paste), so no parentheses are added: a macro that parenthesises its parameters
   and body (the usual style) reads the same, and a sloppy one (``#define SQ(x) x*x``) keeps the meaning the
   compiler gives it. Object-like macros whose body names one of the kernel's parameters or locals (``#define ROW
   x[r * N]``: an access in disguise) or is an integer constant (``#define KS 3``, ``#define T (2 * KS)``: a loop
   bound the passes read as a literal) are expanded likewise; the others (``#define EPS 1e-5f``) stay.
2. every call of a ``__device__`` helper of the file whose body is one ``return EXPR;`` (no template, no
   reference parameter, no assignment or increment in ``EXPR``, one definition) inlined when each argument is
   free of side effects: ``((T)(EXPR'))`` with each parameter of ``EXPR`` replaced by its argument, parenthesised
   unless primary or postfix, and cast to the parameter's type where the argument's declared type differs
   (parameters are by value: the conversion happens once, as at the call); the cast to the return type ``T`` is
   left out where ``EXPR`` already has it (a float helper of float arithmetic). Helpers with loops or several
   statements stay calls.

A macro invoked in the kernel that cannot be expanded (``#``, ``##``, ``__VA_ARGS__``, a body with unbalanced
brackets, defined more than once, under ``#if`` or inside the kernel, ``#undef``'d, called with the wrong
number of arguments, or an expansion that does not parse) makes the whole expansion void: the kernel text is
returned unchanged with the reasons (``opaque``), and the unit records them (``notes["opaque_macros"]``) so that
no pass reasons about writes it cannot see (:class:`~.base.Unit` then has no body for the passes).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# the file's macros, which the scaffold reads too (a dimension written #define D 64): one definition
from ptxfactory.harness.cmacros import Macro, ancestors, file_macros, integer_constants, tokens  # noqa: F401

from . import syntax as sx
from .base import LOAD_FUNCS
from .syntax import Node

MAX_DEPTH = 16  # nested macro expansions / helper inlining rounds

_STICKY = set("+-*/%&|^!<>=.:#")
_INTEGER = re.compile(r"(0[xX][0-9a-fA-F]+|\d+)[uUlL]*")
# Calls an argument may hold and stay free of side effects (besides helpers that are themselves inlined).
PURE_FUNCS = sx.VALUE_FUNCS | LOAD_FUNCS


class Opaque(Exception):
    """A macro invoked in the kernel that the expansion cannot see through (the message says which and why)."""


@dataclass
class Helper:
    name: str
    ret: str
    params: list[tuple[str, str]]  # (type, name)
    expr: Node
    fn: Node
    data: bytes
    ret_kind_matches: bool


def _join(parts: list[tuple[str, bool]]) -> str:
    """Concatenate ``(text, substituted)`` pieces: a space where a substituted piece and its neighbour would paste
    into one token (``-`` then ``-a`` -> ``- -a``); pieces adjacent in the original text are kept as they were."""
    out, prev_sub = "", False
    for p, sub in parts:
        if out and p and (sub or prev_sub):
            a, b = out[-1], p[0]
            if (a.isalnum() or a == "_") and (b.isalnum() or b == "_") or (a in _STICKY and b in _STICKY):
                out += " "
        out += p
        prev_sub = sub
    return out


class _Expander:
    def __init__(self, macros: dict[str, Macro], local_names: set[str]):
        self.macros = macros
        self.local_names = local_names
        self.used: set[str] = set()

    def active(self, name: str) -> Macro | None:
        m = self.macros.get(name)
        if m is None:
            return None
        if m.params is None:
            # object-like: a body naming the kernel's own variables is expanded, and so is an integer constant (#define
            # KS 3, #define TILE (2 * 16)): a loop bound written KS then reads as the literal every pass proves things
            # about; any other body (#define EPS 1e-5f) stays a name
            if not (any(k == "ident" and t in self.local_names for k, t in tokens(m.body)) or self.numeric(m, set())):
                return None
        return m

    def numeric(self, m: Macro, seen: set[str]) -> bool:
        """Whether object-like ``m``'s body is an integer constant expression: integer literals, operators,
        parentheses and other such macros (not itself), nothing else, not empty."""
        toks = [(k, t) for k, t in tokens(m.body) if k not in ("ws", "comment")]
        if not toks or m.problem is not None:
            return False
        for k, t in toks:
            if (k == "number" and _INTEGER.fullmatch(t)) or (k == "punct" and t in "()+-*/%<>&|^~"):
                continue
            inner = self.macros.get(t) if k == "ident" else None
            if inner is None or inner.params is not None or t in seen | {m.name} or not self.numeric(inner, seen | {m.name}):
                return False
        return True

    def expand(self, toks: list[tuple[str, str]], disabled: frozenset[str], depth: int) -> str:
        if depth > MAX_DEPTH:
            raise Opaque("macros nested deeper than the expansion follows")
        parts, i = [], 0
        while i < len(toks):
            kind, t = toks[i]
            m = self.active(t) if kind == "ident" and t not in disabled else None
            if m is None:
                parts.append((t, False))
                i += 1
                continue
            if m.params is None:  # object-like
                if m.problem:
                    raise Opaque(f"macro {t!r}: {m.problem}")
                self.used.add(t)
                parts.append((self.expand(tokens(m.body), disabled | {t}, depth + 1), True))
                i += 1
                continue
            j = i + 1
            while j < len(toks) and toks[j][0] in ("ws", "comment"):
                j += 1
            if j >= len(toks) or toks[j][1] != "(":
                parts.append((t, False))  # the name not followed by '(': not an invocation
                i += 1
                continue
            if m.problem:
                raise Opaque(f"macro {t!r}: {m.problem}")
            args, cur, level, k = [], [], 0, j + 1
            while k < len(toks):
                kk, tt = toks[k]
                if kk == "punct" and tt == "(":
                    level += 1
                elif kk == "punct" and tt == ")":
                    if level == 0:
                        break
                    level -= 1
                elif kk == "punct" and tt == "," and level == 0:
                    args.append(cur)
                    cur = []
                    k += 1
                    continue
                elif kk == "directive":
                    raise Opaque(f"macro {t!r}: a directive inside its arguments")
                cur.append(toks[k])
                k += 1
            if k >= len(toks):
                raise Opaque(f"macro {t!r}: its invocation is not closed")
            args.append(cur)
            if len(m.params) == 0 and len(args) == 1 and not _strip(args[0]):
                args = []
            if len(args) != len(m.params):
                raise Opaque(f"macro {t!r}: {len(args)} arguments for {len(m.params)} parameters")
            self.used.add(t)
            # as the preprocessor sees them: a comment is a space; the invocation's line breaks follow its expansion
            args = [[(x[0], " ") if x[0] == "comment" or (x[0] == "ws" and "\n" in x[1]) else x for x in a] for a in args]
            breaks = "".join(x[1] for x in toks[i:k + 1]).count("\n")
            expanded = {p: self.expand(_strip(a), disabled, depth + 1) for p, a in zip(m.params, args)}
            body = _join([(expanded[bt], True) if bk == "ident" and bt in expanded else (bt, False) for bk, bt in tokens(m.body)])
            result = self.expand(tokens(body), disabled | {t}, depth + 1)
            tail = [x for x in tokens(result) if x[0] not in ("ws", "comment")]
            if tail and tail[-1][0] == "ident" and (self.macros.get(tail[-1][1]) or Macro("", None, "")).params is not None:
                raise Opaque(f"macro {t!r}: its expansion ends in the name of a function-like macro")
            parts.append((result, True))
            if breaks:
                parts.append(("\n" * breaks, False))
            i = k + 1
        return _join(parts)


def _strip(toks: list[tuple[str, str]]) -> list[tuple[str, str]]:
    a, b = 0, len(toks)
    while a < b and toks[a][0] in ("ws", "comment"):
        a += 1
    while b > a and toks[b - 1][0] in ("ws", "comment"):
        b -= 1
    return toks[a:b]


def _errors(data: bytes) -> int:
    root = sx.parse(data).root_node
    return sum(1 for n in sx.walk(root) if n.type == "ERROR" or n.is_missing)


# ---- helpers ---------------------------------------------------------------------------------------------------

def file_helpers(root: Node, data: bytes, kernel_start: int) -> dict[str, Helper]:
    """The file's one-line ``__device__`` helpers defined before the kernel, by name (overloaded names left out)."""
    found: dict[str, list[Helper | None]] = {}
    kernel_ns = _namespaces(root.descendant_for_byte_range(kernel_start, kernel_start))
    for n in sx.walk(root):
        if n.type != "function_definition" or n.start_byte >= kernel_start:
            continue
        decl = sx.function_declarator(n)
        if decl is None:
            continue
        name_node = decl.child_by_field_name("declarator")
        if not sx.is_ident(name_node):
            continue
        name = sx.text(name_node)
        if _namespaces(n) != kernel_ns:
            continue  # another namespace's function: an unqualified call in the kernel does not name it
        found.setdefault(name, []).append(_helper(n, decl, name, data, kernel_ns))
    return {k: v[0] for k, v in found.items() if len(v) == 1 and v[0] is not None}


def _namespaces(node: Node | None) -> tuple[str, ...]:
    return tuple(sx.text(a.child_by_field_name("name")) for a in ancestors(node) if a.type == "namespace_definition") \
        if node is not None else ()


def _helper(fn: Node, decl: Node, name: str, data: bytes, kernel_ns: tuple[str, ...]) -> Helper | None:
    kinds = {c.type for c in fn.children}
    if "__device__" not in kinds or "__global__" in kinds:
        return None
    if fn.parent is not None and fn.parent.type == "template_declaration":
        return None
    if any(a.type in ("field_declaration_list", "template_declaration") for a in ancestors(fn)):
        return None
    if _namespaces(fn) != kernel_ns:
        return None  # its names resolve in another namespace than the kernel's
    # the return type: qualifiers, the type, a pointer declarator around the function declarator
    ret_type = sx.type_text(fn.child_by_field_name("type"))
    if not ret_type or ret_type == "void" or "auto" in ret_type.split():
        return None
    quals = [sx.text(c) for c in fn.children if c.type == "type_qualifier"]
    stars = ""
    d = fn.child_by_field_name("declarator")
    while d is not None and d is not decl and d != decl:
        if d.type == "pointer_declarator":
            if any(c.type == "type_qualifier" for c in d.children):
                return None
            stars += "*"
        elif d.type != "parenthesized_declarator":
            return None
        d = d.child_by_field_name("declarator")
    ret = " ".join(quals + [ret_type]) + stars
    params = []
    plist = decl.child_by_field_name("parameters")
    for p in plist.named_children:
        if p.type == "comment":
            continue
        if p.type != "parameter_declaration" or p.child_by_field_name("default_value") is not None:
            return None
        pd = p.child_by_field_name("declarator")
        pquals = [sx.text(c) for c in p.children if c.type == "type_qualifier"]
        ptype = sx.type_text(p.child_by_field_name("type"))
        if pd is None:
            if ptype == "void" and len(plist.named_children) == 1:
                continue
            return None
        pstars = ""
        while pd is not None and pd.type == "pointer_declarator":
            if any(c.type == "type_qualifier" and sx.text(c) != "__restrict__" and sx.text(c) != "const" for c in pd.children):
                return None
            pstars += "*" + ("const" if any(sx.text(c) == "const" for c in pd.children if c.type == "type_qualifier") else "")
            pd = pd.child_by_field_name("declarator")
        if not sx.is_ident(pd):
            return None  # T& r, T a[], a function pointer: not inlined
        params.append((" ".join(pquals + [ptype]) + pstars, sx.text(pd)))
    body = fn.child_by_field_name("body")
    stmts = sx.statements(body) if body is not None else []
    if len(stmts) != 1 or stmts[0].type != "return_statement" or stmts[0].named_child_count != 1:
        return None
    expr = stmts[0].named_children[0]
    if expr.type == "comment" or sx.contains_type(expr, ("assignment_expression", "update_expression", "comma_expression",
                                                          "lambda_expression", "compound_statement", "ERROR", "sizeof_expression",
                                                          "alignof_expression", "decltype", "typeid_expression")):
        return None
    if sx.contains_type(expr, ("pointer_expression",)) and any(
        x.type == "pointer_expression" and sx.operator(x) == "&" for x in sx.walk(expr)):
        return None  # the address of a by-value parameter: not the caller's variable
    if name in sx.identifiers(expr):
        return None  # recursive
    rk = sx._kind(ret)
    matches = rk in ("float", "double") and sx.Types(fn).of(expr) == rk and "*" not in ret
    return Helper(name, ret, params, expr, fn, data, matches)


_PRIMARY = ("identifier", "number_literal", "parenthesized_expression", "subscript_expression", "call_expression",
            "field_expression", "string_literal", "char_literal", "true", "false", "null")


def _pure(node: Node, helpers: dict[str, Helper]) -> bool:
    for n in sx.walk(node):
        if n.type in ("assignment_expression", "update_expression", "comma_expression", "lambda_expression", "new_expression",
                      "delete_expression", "ERROR"):
            return False
        if n.type == "call_expression":
            name = sx.call_name(n)
            if name is None or (name not in PURE_FUNCS and name not in helpers):
                return False
    return True


def _arg_type(arg: Node, types: sx.Types, helpers: dict[str, Helper]) -> str | None:
    """The declared type of an argument when it is a name, a literal or a cast (``"float"``, ``"const float*"``); else None."""
    a = sx.unparen(arg)
    if sx.is_ident(a):
        t = types.scalar.get(sx.text(a))
        if t is not None:
            return t
        e = types.element.get(sx.text(a))
        return f"{e}*" if e is not None else None
    if a.type == "number_literal":
        k = types.of(a)
        return {"int": "int", "float": "float", "double": "double"}.get(k) if not re.search(r"[uUlL]$", sx.text(a)) else None
    if a.type == "cast_expression":
        return sx.type_text(a.child_by_field_name("type"))
    k = _kind_of(a, types, helpers)
    return k if k in ("float", "double") else None  # an integer expression's exact type (int, size_t) is not known


def _kind_of(node: Node | None, types: sx.Types, helpers: dict[str, Helper]) -> str | None:
    """:meth:`syntax.Types.of`, knowing also what the file's helpers return."""
    node = sx.unparen(node)
    if node is None:
        return None
    if node.type == "call_expression" and sx.call_name(node) in helpers:
        return sx._kind(helpers[sx.call_name(node)].ret)
    if node.type == "binary_expression" and sx.operator(node) in ("+", "-", "*", "/"):
        a = _kind_of(node.child_by_field_name("left"), types, helpers)
        b = _kind_of(node.child_by_field_name("right"), types, helpers)
        if a is None or b is None:
            return None
        return "double" if "double" in (a, b) else "float" if "float" in (a, b) else "int"
    if node.type == "unary_expression" and sx.operator(node) in ("-", "+"):
        return _kind_of(node.child_by_field_name("argument"), types, helpers)
    return types.of(node)


def _norm(t: str) -> str:
    return " ".join(w for w in t.replace("*", " * ").split() if w not in ("__restrict__", "volatile"))


def _same_type(arg_t: str | None, param_t: str) -> bool:
    """Passing an argument of type ``arg_t`` to ``param_t`` is no conversion at all (or adds ``const`` to a pointee)."""
    if arg_t is None:
        return False
    a, p = _norm(arg_t), _norm(param_t)
    if "*" in p:
        strip = lambda s: " ".join(w for w in s.split() if w != "const")  # noqa: E731
        return p.count("*") == a.count("*") == 1 and strip(a) == strip(p)
    drop = lambda s: " ".join(w for w in s.split() if w != "const")  # noqa: E731
    return drop(a) == drop(p)


def _inline_once(text: bytes, helpers: dict[str, Helper]) -> bytes | None:
    """The kernel text with each eligible helper call inlined (outermost calls first), or None when none is."""
    root = sx.parse(text).root_node
    fn = sx.kernel_function(root)
    if fn is None:
        return None
    types = sx.Types(fn)
    declared = sx.declared_names(fn)
    changed = False

    def replace(node: Node) -> bytes | None:
        nonlocal changed
        if node.type != "call_expression":
            return None
        h = helpers.get(sx.call_name(node) or "")
        if h is None:
            return None
        args = sx.call_args(node)
        if len(args) != len(h.params) or not all(_pure(a, helpers) for a in args):
            return None
        free = sx.identifiers(h.expr) - {n for _, n in h.params}
        if free & declared:
            return None  # a kernel variable would capture a name the helper means at file scope
        subst: dict[str, bytes] = {}
        for (ptype, pname), a in zip(h.params, args):
            at = sx.render(a, text, replace)  # nested helper calls in the argument
            if a.type not in _PRIMARY:
                at = b"(" + at + b")"
            if not _same_type(_arg_type(a, types, helpers), ptype):
                at = b"((" + ptype.encode() + b")" + (at if at.startswith(b"(") else b"(" + at + b")") + b")"
            subst[pname] = at

        def put(n: Node) -> bytes | None:
            if n.type == "identifier" and sx.text(n) in subst:
                return subst[sx.text(n)]
            if n.type == "comment":
                return b" "
            return None

        # on one line, so the kernel's line numbers (in the passes' reasons) stay those of the user's file
        body = re.sub(rb"\s*\n\s*", b" ", sx.render(h.expr, h.data, put))
        changed = True
        if h.ret_kind_matches:
            return b"(" + body + b")"
        return b"((" + h.ret.encode() + b")(" + body + b"))"

    out = sx.render(fn, text, replace)
    if not changed:
        return None
    return text[: fn.start_byte] + out + text[fn.end_byte:]


# ---- the whole expansion -----------------------------------------------------------------------------------------

def expand_kernel(source: str, kernel_text: str, kernel_start: int) -> tuple[str, list[str]]:
    """``(text, opaque)``: the kernel definition with the file's macros and one-line helpers seen through, or the
    unchanged text and why a macro invoked in it cannot be expanded (``kernel_start``: the definition's first byte in
    ``source``, UTF-8)."""
    data = source.encode()
    root = sx.parse(data).root_node
    kernel_end = kernel_start + len(kernel_text.encode())
    macros = file_macros(root, kernel_start, kernel_end)
    helpers = file_helpers(root, data, kernel_start)
    kfn = sx.kernel_function(sx.parse(kernel_text.encode()).root_node)
    if kfn is None or (not macros and not helpers):
        return kernel_text, []
    local_names = sx.declared_names(kfn)
    before = _errors(kernel_text.encode())
    text = kernel_text
    try:
        for _ in range(MAX_DEPTH):
            exp = _Expander(macros, local_names)
            new = exp.expand(tokens(text), frozenset(), 0) if macros else text
            inlined = _inline_once(new.encode(), helpers) if helpers else None
            if inlined is not None:
                new = inlined.decode()
            if new == text:
                break
            text = new
        else:
            raise Opaque("the expansion does not settle")
        if _errors(text.encode()) > before or sx.kernel_function(sx.parse(text.encode()).root_node) is None:
            raise Opaque("the expanded kernel does not parse")
    except Opaque as e:
        return kernel_text, [str(e)]
    return text, []


CONSTANTS_NOTE = "constants"  # the unit note: the file's object-like macros whose body is an integer literal
