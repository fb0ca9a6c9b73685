"""Scaffold a spec for a PTX ``.entry`` (``ptxfactory init FILE.ptx``, "Create spec for NAME" in a ``.ptx`` file).

From the entry's ``.param`` list and its body (:mod:`.ptx_ir`):

- **buffers**: a ``.ptr`` parameter, or a 64-bit integer one that some global load or store's address derives
  from; its **role** from those accesses (loads only: ``in``, stores only: ``out``, both or an atomic:
  ``inout``), its **dtype** from their type (``ld.global.f32`` -> f32; ``.b32`` -> f32 with a TODO), its
  ``align`` from a ``.ptr .align N`` above the element size;
- **scalars**: the others, dtype from the PTX type (``.u32`` -> u32, ``.s32``/``.b32`` -> i32, ``.f32`` -> f32);
  integer ones named like sizes (``n``, ``M``, ``rows``...) are the size symbols;
- **launch**: one thread per element, 256 per block, with a TODO (a PTX file has no host code to read it from).

Shapes, sizes and tolerances get TODO-marked placeholders, as for CUDA (:mod:`.scaffold`); the result is
validated with :func:`ptxfactory.protocol.spec.parse_spec`.
"""
from __future__ import annotations

from ptxfactory.protocol.spec import SpecError, parse_spec

from .ptx import PtxSyntaxError, parse_entries
from .ptx_ir import accesses, param_origins, statements
from .scaffold import Scaffold, ScaffoldError, _placeholder_sizes, _toml, guessed_keys, is_size_name

_SCALAR_DTYPE = {"u32": "u32", "s32": "i32", "b32": "i32", "s64": "i64", "u64": "i64", "b64": "i64", "f32": "f32",
                 "f64": "f64", "f16": "f16", "bf16": "bf16", "b16": "f16", "u8": "u8", "s8": "i8", "b8": "u8",
                 "u16": "i32", "s16": "i32"}
_ACCESS_DTYPE = {"f32": "f32", "f64": "f64", "f16": "f16", "bf16": "bf16", "s32": "i32", "u32": "u32", "s64": "i64",
                 "u64": "i64", "s8": "i8", "u8": "u8", "b8": "u8", "b16": "f16", "b32": "f32", "b64": "f64"}


def scaffold_entry(source: str, kernel: str, source_name: str = "<source>") -> Scaffold:
    """The ``[kernel.NAME]`` tables of the ``.entry`` ``kernel`` of the PTX module ``source``.

    Raises:
        ScaffoldError: no such entry, the PTX cannot be read (``FILE:LINE: message``), or the entry has an
            aggregate parameter (``.b8 p[16]``) that a spec cannot describe.
    """
    try:
        entries = parse_entries(source)
    except PtxSyntaxError as exc:
        raise ScaffoldError(f"{source_name}:{exc.line}: {exc.args[0].split(': ', 1)[-1]}") from None
    entry = next((e for e in entries if e.name == kernel), None)
    if entry is None:
        raise ScaffoldError(f"no .entry named {kernel!r} (found: {', '.join(e.name for e in entries) or 'none'})")
    body_at = entry.text.index("{") + 1
    stmts = statements(entry.text, body_at, len(entry.text) - 1)
    found = accesses(stmts, param_origins(stmts))
    symbols = [p.name for p in entry.params if not p.may_be_pointer and p.array is None and p.type[0] in "usb"
               and p.bits in (32, 64) and is_size_name(p.name)]
    synthetic = not symbols
    symbol_list = symbols or ["N"]
    check_sizes, bench_sizes = _placeholder_sizes(symbol_list)
    arg_lines: list[tuple[str, str | None]] = []
    guesses: list[str] = []  # the keys that are guesses (every shape: an entry has no index to read), for the header
    out_dtypes = []
    for p in entry.params:
        where = f"{source_name}:{p.line}"
        if p.array is not None:
            raise ScaffoldError(f"{where}: .param {p.name} is an aggregate (.{p.type} {p.name}[{p.array}]): a spec cannot describe it")
        mine = [a for a in found if p.name in a.params and (len(a.params) == 1 or p.may_be_pointer)]
        todo: list[str] = []
        notes: list[str] = []
        if p.ptr or (p.may_be_pointer and mine and not is_size_name(p.name)):
            kinds = {a.kind for a in mine}
            role = "inout" if "atomic" in kinds or {"load", "store"} <= kinds else "out" if kinds == {"store"} else "in"
            if not mine:
                todo.append("role: the entry never loads or stores through it")
            else:
                notes.append(f"{'loaded' if 'load' in kinds else ''}{' and ' if len(kinds) > 1 else ''}"
                             f"{'stored' if 'store' in kinds else ''}{'atomic' if kinds == {'atomic'} else ''}".strip())
            types = [a.type for a in mine if a.type in _ACCESS_DTYPE]
            dtype = _ACCESS_DTYPE[types[0]] if types else "f32"
            if not types or types[0].startswith("b"):
                todo.append(f"dtype: read as .{types[0] if types else '?'}; {dtype} is a guess")
            entry_d: dict = {"name": p.name, "role": role, "dtype": dtype, "shape": list(symbol_list)}
            todo.insert(0, "shape (a guess: every size symbol)")
            size = {"f64": 8, "i64": 8, "f16": 2, "bf16": 2, "i8": 1, "u8": 1}.get(dtype, 4)
            if p.align is not None and p.align > size:
                entry_d["align"] = p.align
                notes.append(f".ptr .align {p.align}")
            if role in ("in", "inout"):
                entry_d["init"] = "normal" if dtype in ("f32", "f64", "f16", "bf16") else "randint(0, 100)"
            else:
                out_dtypes.append(dtype)
        else:
            dtype = _SCALAR_DTYPE.get(p.type, "i32")
            entry_d = {"name": p.name, "role": "scalar", "dtype": dtype}
            if p.name in symbols:
                entry_d["value"] = p.name
                notes.append("size symbol")
            elif dtype in ("f32", "f64", "f16", "bf16"):
                entry_d["value"] = 1.0
                todo.append(f"value of {p.name}")
            else:
                entry_d["value"] = 1
                todo.append(f"value of {p.name} (a number, or an expression over {', '.join(symbol_list)})")
            if p.may_be_pointer and not mine:
                todo.append(f".{p.type} {p.name}: no load or store goes through it, so it is taken as a scalar")
        comment = "; ".join(([f"TODO {'; '.join(todo)}"] if todo else []) + [n for n in notes if n])
        arg_lines.append((f"  {_toml(entry_d)},", comment or None))
        guesses += guessed_keys(p.name, todo)
    tol = 1e-2 if any(d in ("f16", "bf16") for d in out_dtypes) else 1e-3
    total = " * ".join(symbol_list)
    out: list[tuple[str, str | None]] = [
        (f"[kernel.{kernel}]", None),
        ('arch = "sm_90a"', "the GPU's arch (sm_90a: H100, H200); ptxas assembles the entry for it"),
        ("args = [", ".param order; checked against the entry"),
        *arg_lines,
        ("]", None),
    ]
    if synthetic:
        out.append(("", "TODO sizes: the entry takes no size parameter; N is a placeholder for its buffers' length"))
    out += [
        ("", "TODO launch: a PTX file has no launch to read; guessed one thread per element, 256 per block"),
        (f"launch = {_toml({'grid': [f'cdiv({total}, 256)'], 'block': [256], 'shared_mem': 0, 'policy': 'free'})}", None),
        ("", None),
        (f"[kernel.{kernel}.check]", None),
        ('reference = "kernel"', "the original entry is the oracle"),
        (f"rtol = {tol}", "TODO tolerances: how far a candidate may differ from the original"),
        (f"atol = {tol}", None),
        ("seeds = 3", None),
        ("", "TODO sizes: placeholders; list the sizes the kernel must be correct at (odd ones, tails, one row)"),
        (f"sizes = {_toml(check_sizes)}", None),
        ("", None),
        (f"[kernel.{kernel}.bench]", None),
        ('metric = "geomean_time"', None),
        ("", "TODO sizes: placeholders; list the sizes you want faster"),
        (f"sizes = {_toml(bench_sizes)}", None),
    ]
    lines, todos = [], []
    for i, (code, comment) in enumerate(out, 1):
        lines.append(code if comment is None else f"# {comment}" if not code else f"{code}  # {comment}")
        if comment and "TODO" in comment:
            todos.append((i, comment[comment.index("TODO"):]))
    table = "\n".join(lines) + "\n"
    try:
        parse_spec(table, f"{source_name}.toml")
    except SpecError as exc:
        raise ScaffoldError(f"cannot scaffold a spec for {kernel!r} (please report it): {exc}") from None
    guesses += ["sizes (N)"] * synthetic + ["launch"]  # a PTX file has no launch to read
    return Scaffold(kernel=kernel, table=table, todos=tuple(todos), guesses=tuple(guesses))
