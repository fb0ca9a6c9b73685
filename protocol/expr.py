"""Integer expressions over size symbols, as written in specs: ``"M"``, ``"(M + 3) // 4"``, ``"256 * 4"``.

Only integer literals, symbol names, ``+ - * // % **``, unary minus, parentheses and the functions
``min``, ``max`` and ``cdiv`` (ceiling division) are allowed; anything else raises :class:`ExprError`.
Constraints (:func:`holds`) add comparisons (``== != < <= > >=``) and ``and``/``or``/``not``.

Every evaluation is bounded: an expression has at most :data:`MAX_LENGTH` characters and
:data:`MAX_DEPTH` levels of nesting, and every intermediate value stays within ``±2**MAX_BITS``
(larger values raise :class:`ExprError`), so no spec can make an evaluation slow or unbounded.
"""
from __future__ import annotations

import ast
import contextvars
import functools
import re
from collections.abc import Mapping

_FUNCS = {
    "min": min,
    "max": max,
    "cdiv": lambda a, b: -(-a // b),
}


MAX_EXPONENT = 64  # ``2 ** 64`` at most: a spec's sizes never need more, and a huge power would hang the parser
MAX_BITS = 80  # every intermediate value within ±2**80: sizes, bytes and FLOP counts need far less
MAX_LENGTH = 1000  # characters in one expression
MAX_DEPTH = 50  # nesting levels (parentheses, operators, calls) in one expression


class ExprError(ValueError):
    """An expression that does not parse, uses a forbidden construct, or names an unknown symbol."""


def _parse(expr: str | int | float) -> ast.AST:
    if isinstance(expr, bool):
        raise ExprError(f"expected an integer expression, got {expr!r}")
    if isinstance(expr, (int, float)):
        _bounded(expr, expr)
        return ast.Constant(expr)
    return _parse_text(str(expr))


@functools.lru_cache(maxsize=4096)
def _parse_text(text: str) -> ast.AST:
    """The checked syntax tree of an expression's text, parsed once (a launch's grid is evaluated for every launch;
    the trees are only read)."""
    if len(text) > MAX_LENGTH:
        raise ExprError(f"expression of {len(text)} characters is too long (at most {MAX_LENGTH}): {text[:40]!r}...")
    # Nesting is measured on the text before Python's parser sees it: ~1000 nested levels overflow its stack.
    depth = level = 0
    for ch in text:
        level += ch == "("
        level -= ch == ")"
        depth = max(depth, level)
    unary = max((len(m) for m in re.findall(r"(?:[-+~]\s*){2,}", text)), default=0)
    if depth > MAX_DEPTH or unary > MAX_DEPTH:
        raise ExprError(f"expression nested too deeply (at most {MAX_DEPTH} levels): {text[:40]!r}...")
    try:
        tree = ast.parse(text, mode="eval").body
    except (SyntaxError, RecursionError, MemoryError, ValueError) as exc:
        raise ExprError(f"cannot parse expression {text[:80]!r}: {getattr(exc, 'msg', exc)}") from None
    if _depth(tree) > MAX_DEPTH:
        raise ExprError(f"expression nested too deeply (at most {MAX_DEPTH} levels): {text[:40]!r}...")
    return tree


def _depth(node: ast.AST) -> int:
    """Nesting depth of an AST, iteratively (no recursion on user input)."""
    deepest, stack = 0, [(node, 1)]
    while stack:
        n, d = stack.pop()
        deepest = max(deepest, d)
        if d <= MAX_DEPTH:
            stack.extend((c, d + 1) for c in ast.iter_child_nodes(n))
    return deepest


def _bounded(value, src):
    """``value`` when it lies within ±2**MAX_BITS (a finite number), else ExprError."""
    if isinstance(value, float) and value != value:
        raise ExprError(f"{src!r} is not a number")
    if abs(value) > 2**MAX_BITS:
        raise ExprError(f"value out of range in {src!r} (|value| > 2**{MAX_BITS})")
    return value


def symbols_in(expr: str | int | float) -> set[str]:
    """Names of the size symbols an expression uses (function names excluded).

    Raises ExprError for a call of anything but ``min``, ``max`` and ``cdiv``."""
    names = set()
    for node in ast.walk(_parse(expr)):
        if isinstance(node, ast.Call):
            fname = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
            if fname not in _FUNCS:
                raise ExprError(f"function {fname}() is not allowed in {expr!r} (only {', '.join(_FUNCS)})")
        elif isinstance(node, ast.Name) and node.id not in _FUNCS:
            names.add(node.id)
    return names


_REAL = contextvars.ContextVar("ptxf_real_division", default=False)  # evaluate(real=True) in progress


def evaluate(expr: str | int | float, symbols: Mapping[str, int | float], real: bool = False) -> int | float:
    """Evaluate ``expr`` with the given symbol values. ``real``: ``/`` divides as real numbers (an input
    distribution's float bounds, ``normal(0, 1 / D)``); otherwise it is refused (sizes are integers).

    Raises:
        ExprError: on a syntax error, a forbidden construct, or a symbol missing from ``symbols``.
    """
    token = _REAL.set(real)
    try:
        return _eval(_parse(expr), symbols, expr)
    finally:
        _REAL.reset(token)


def to_c(expr: str | int, names: Mapping[str, str]) -> str:
    """``expr`` as a C++ expression of type ``long long``, each size symbol replaced by ``names[symbol]`` (a scalar
    argument's name, cast to ``long long``): what a family's kernel computes from its arguments where the spec writes
    ``N * C`` or ``cdiv(W, 2)``. ``//`` and ``%`` become C's ``/`` and ``%``, which agree with Python's on
    non-negative operands (sizes); ``min``/``max`` become CUDA's ``long long`` overloads and ``cdiv`` a ceiling division.

    Raises:
        ExprError: as :func:`evaluate`, for a symbol missing from ``names``, and for ``**`` or a float literal (no
            C integer equivalent).
    """
    return _to_c(_parse(expr), names, expr)


_C_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "/", ast.Mod: "%"}


def _to_c(node: ast.AST, names: Mapping[str, str], src) -> str:
    match node:
        case ast.Constant(value=v) if isinstance(v, int) and not isinstance(v, bool):
            return f"{v}LL"
        case ast.Name(id=name):
            if name not in names:
                raise ExprError(f"symbol {name!r} in {src!r} has no argument that passes it (known: {', '.join(sorted(names)) or 'none'})")
            return f"(long long)({names[name]})"
        case ast.UnaryOp(op=ast.USub(), operand=x):
            return f"(-{_to_c(x, names, src)})"
        case ast.UnaryOp(op=ast.UAdd(), operand=x):
            return _to_c(x, names, src)
        case ast.BinOp(left=a, op=op, right=b) if type(op) in _C_OPS:
            return f"({_to_c(a, names, src)} {_C_OPS[type(op)]} {_to_c(b, names, src)})"
        case ast.Call(func=ast.Name(id="cdiv"), args=[a, b], keywords=[]):
            x, y = _to_c(a, names, src), _to_c(b, names, src)
            return f"(({x} + {y} - 1LL) / {y})"
        case ast.Call(func=ast.Name(id=fname), args=args, keywords=[]) if fname in ("min", "max") and args:
            out = _to_c(args[0], names, src)
            for a in args[1:]:  # CUDA's long long overloads of min and max: each operand written once
                out = f"{fname}({out}, {_to_c(a, names, src)})"
            return out
    raise ExprError(f"{ast.unparse(node)!r} in {src!r} has no C integer form (integers, size symbols, + - * // %, min, max, cdiv)")


def holds(constraint: str, symbols: Mapping[str, int | float]) -> bool:
    """Whether a constraint such as ``"N % 8 == 0"`` or ``"D <= 8192 and M >= 1"`` holds at ``symbols``.

    Comparisons (``== != < <= > >=``, chained too), ``and``, ``or`` and ``not`` over integer expressions.

    Raises:
        ExprError: as :func:`evaluate`, or when the expression is not a comparison/boolean.
    """
    tree = _parse(constraint)
    if not isinstance(tree, (ast.Compare, ast.BoolOp)) and not (isinstance(tree, ast.UnaryOp) and isinstance(tree.op, ast.Not)):
        raise ExprError(f"{constraint!r} is not a condition: write a comparison such as 'N % 8 == 0' or 'D <= 8192'")
    return bool(_eval(tree, symbols, constraint, True))


_COMPARE = {ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b, ast.Lt: lambda a, b: a < b,
            ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b}


def _eval(node: ast.AST, env: Mapping[str, int | float], src, cond: bool = False) -> int | float:
    is_condition = isinstance(node, (ast.Compare, ast.BoolOp)) or (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not))
    if is_condition and not cond:
        raise ExprError(f"{ast.unparse(node)!r} is not allowed in {src!r}: a size expression has no comparisons (those belong in 'constraints')")
    return _bounded(_eval_node(node, env, src, cond), src)


def _eval_node(node: ast.AST, env: Mapping[str, int | float], src, cond: bool) -> int | float:
    match node:
        case ast.Constant(value=v) if isinstance(v, (int, float)) and not isinstance(v, bool):
            return v
        case ast.Name(id=name):
            if name not in env:
                raise ExprError(f"unknown symbol {name!r} in {src!r} (known: {', '.join(sorted(env)) or 'none'})")
            return env[name]
        case ast.UnaryOp(op=ast.USub(), operand=x):
            return -_eval(x, env, src, cond)
        case ast.UnaryOp(op=ast.UAdd(), operand=x):
            return _eval(x, env, src, cond)
        case ast.BinOp(left=a, op=op, right=b):
            x, y = _eval(a, env, src, cond), _eval(b, env, src, cond)
            if isinstance(op, ast.Add):
                return x + y
            if isinstance(op, ast.Sub):
                return x - y
            if isinstance(op, ast.Mult):
                return x * y
            if isinstance(op, (ast.FloorDiv, ast.Mod)) and y == 0:
                raise ExprError(f"division by zero in {src!r}")
            if isinstance(op, ast.FloorDiv):
                return x // y
            if isinstance(op, ast.Mod):
                return x % y
            if isinstance(op, ast.Pow):
                if not (isinstance(y, int) and 0 <= y <= MAX_EXPONENT) or abs(x) > 2**32:
                    raise ExprError(f"exponent out of range in {src!r} (an integer power 0..{MAX_EXPONENT} of a base under 2**32)")
                return x**y
            if isinstance(op, ast.Div) and _REAL.get():
                if y == 0:
                    raise ExprError(f"division by zero in {src!r}")
                return x / y
            if isinstance(op, ast.Div):
                raise ExprError(f"'/' is not allowed in {src!r}: sizes are integers, use '//' (floor) or cdiv(a, b) (ceiling)")
        case ast.Call(func=ast.Name(id=fname), args=args, keywords=[]) if fname in _FUNCS:
            values = [_eval(a, env, src, cond) for a in args]
            arity = 2 if fname == "cdiv" else None
            if (arity and len(values) != arity) or not values:
                raise ExprError(f"{fname}() takes {arity or 'at least 1'} argument(s), got {len(values)} in {src!r}")
            if fname == "cdiv" and values[1] == 0:
                raise ExprError(f"division by zero in {src!r}")
            return _FUNCS[fname](*values)
        case ast.Compare(left=left, ops=ops, comparators=rights):
            x = _eval(left, env, src, cond)
            for op, right in zip(ops, rights):
                y = _eval(right, env, src, cond)
                if type(op) not in _COMPARE:
                    break
                if not _COMPARE[type(op)](x, y):
                    return 0
                x = y
            else:
                return 1
        case ast.BoolOp(op=ast.And(), values=values):
            return int(all(_eval(v, env, src, cond) for v in values))
        case ast.BoolOp(op=ast.Or(), values=values):
            return int(any(_eval(v, env, src, cond) for v in values))
        case ast.UnaryOp(op=ast.Not(), operand=x):
            return int(not _eval(x, env, src, cond))
        case ast.Call(func=func):
            fname = func.id if isinstance(func, ast.Name) else ast.unparse(func)
            raise ExprError(f"function {fname}() is not allowed in {src!r} (only {', '.join(_FUNCS)})")
    raise ExprError(f"{ast.unparse(node)!r} is not allowed in {src!r}: integers, size symbols, + - * // % **, min, max, cdiv")
