"""Integer expressions over size symbols, as written in specs: ``"M"``, ``"(M + 3) // 4"``, ``"256 * 4"``.

Only integer literals, symbol names, ``+ - * // % **``, unary minus, parentheses and the functions
``min``, ``max`` and ``cdiv`` (ceiling division) are allowed; anything else raises :class:`ExprError`.
"""
from __future__ import annotations

import ast
from collections.abc import Mapping

_FUNCS = {
    "min": min,
    "max": max,
    "cdiv": lambda a, b: -(-a // b),
}


MAX_EXPONENT = 64  # ``2 ** 64`` at most: a spec's sizes never need more, and a huge power would hang the parser


class ExprError(ValueError):
    """An expression that does not parse, uses a forbidden construct, or names an unknown symbol."""


def _parse(expr: str | int | float) -> ast.AST:
    if isinstance(expr, bool):
        raise ExprError(f"expected an integer expression, got {expr!r}")
    if isinstance(expr, (int, float)):
        return ast.Constant(expr)
    try:
        return ast.parse(str(expr), mode="eval").body
    except SyntaxError as exc:
        raise ExprError(f"cannot parse expression {expr!r}: {exc.msg}") from None


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


def evaluate(expr: str | int | float, symbols: Mapping[str, int | float]) -> int | float:
    """Evaluate ``expr`` with the given symbol values.

    Raises:
        ExprError: on a syntax error, a forbidden construct, or a symbol missing from ``symbols``.
    """
    return _eval(_parse(expr), symbols, expr)


def _eval(node: ast.AST, env: Mapping[str, int | float], src) -> int | float:
    match node:
        case ast.Constant(value=v) if isinstance(v, (int, float)) and not isinstance(v, bool):
            return v
        case ast.Name(id=name):
            if name not in env:
                raise ExprError(f"unknown symbol {name!r} in {src!r} (known: {', '.join(sorted(env)) or 'none'})")
            return env[name]
        case ast.UnaryOp(op=ast.USub(), operand=x):
            return -_eval(x, env, src)
        case ast.UnaryOp(op=ast.UAdd(), operand=x):
            return _eval(x, env, src)
        case ast.BinOp(left=a, op=op, right=b):
            x, y = _eval(a, env, src), _eval(b, env, src)
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
            if isinstance(op, ast.Div):
                raise ExprError(f"'/' is not allowed in {src!r}: sizes are integers, use '//' (floor) or cdiv(a, b) (ceiling)")
        case ast.Call(func=ast.Name(id=fname), args=args, keywords=[]) if fname in _FUNCS:
            values = [_eval(a, env, src) for a in args]
            arity = 2 if fname == "cdiv" else None
            if (arity and len(values) != arity) or not values:
                raise ExprError(f"{fname}() takes {arity or 'at least 1'} argument(s), got {len(values)} in {src!r}")
            return _FUNCS[fname](*values)
        case ast.Call(func=func):
            fname = func.id if isinstance(func, ast.Name) else ast.unparse(func)
            raise ExprError(f"function {fname}() is not allowed in {src!r} (only {', '.join(_FUNCS)})")
    raise ExprError(f"{ast.unparse(node)!r} is not allowed in {src!r}: integers, size symbols, + - * // % **, min, max, cdiv")
