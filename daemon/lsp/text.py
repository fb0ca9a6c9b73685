"""Source positions: byte offsets (tree-sitter's) to LSP positions in the negotiated encoding, and kernel ranges.

LSP lines end at ``\\n``, ``\\r\\n`` or ``\\r``; ``character`` counts UTF-16 code units unless the
client negotiated ``utf-8`` or ``utf-32``.
"""
from __future__ import annotations

import re
from pathlib import Path

from lsprotocol import types
from pygls import uris

from ptxfactory.harness.source import KernelDef, find_kernels

CUDA_SUFFIXES = (".cu", ".cuh", ".ptx")  # .ptx: a PTX module's .entry kernels (harness/ptx.py)
EOL = re.compile(r"\r\n|\r|\n")


def units(text: str, encoding: str = types.PositionEncodingKind.Utf16) -> int:
    """Length of ``text`` in the encoding's code units."""
    if encoding == types.PositionEncodingKind.Utf8:
        return len(text.encode("utf-8"))
    if encoding == types.PositionEncodingKind.Utf32:
        return len(text)
    return len(text.encode("utf-16-le")) // 2


def position_at(text: str, byte_offset: int, encoding: str = types.PositionEncodingKind.Utf16) -> types.Position:
    """The LSP position of the UTF-8 ``byte_offset`` into ``text``."""
    before = text.encode("utf-8")[:byte_offset].decode("utf-8", errors="ignore")
    line, start = 0, 0
    for m in EOL.finditer(before):
        line, start = line + 1, m.end()
    return types.Position(line=line, character=units(before[start:], encoding))


def kernel_range(text: str, kernel: KernelDef, encoding: str = types.PositionEncodingKind.Utf16) -> types.Range:
    """The range of the kernel's whole definition (``extern "C"`` and templates included)."""
    return types.Range(start=position_at(text, kernel.start_byte, encoding), end=position_at(text, kernel.end_byte, encoding))


def kernel_at(text: str, rng: types.Range, encoding: str = types.PositionEncodingKind.Utf16) -> tuple[KernelDef, types.Range] | None:
    """The kernel whose definition contains the start of ``rng``, with its range; None outside every kernel."""
    start = (rng.start.line, rng.start.character)
    for kernel in find_kernels(text):
        r = kernel_range(text, kernel, encoding)
        if (r.start.line, r.start.character) <= start <= (r.end.line, r.end.character):
            return kernel, r
    return None


def cuda_path(uri: str) -> Path | None:
    """The file system path of a ``file:`` URI of a .cu/.cuh (or .ptx) file, else None."""
    path = uris.to_fs_path(uri)
    if path is None or not path.endswith(CUDA_SUFFIXES):
        return None
    return Path(path)
