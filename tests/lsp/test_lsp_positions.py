"""Kernel ranges in LSP units: byte spans from tree-sitter become UTF-16 positions (no server, no backend)."""
from __future__ import annotations

import pytest
from lsprotocol import types

from ptxfactory.daemon.lsp.text import kernel_at, kernel_range, position_at
from ptxfactory.harness.source import find_kernel, replace_kernel

from _lsp_support import apply_edits

SOURCE = (
    "// 😀 façade: non-BMP and accented characters before the kernel\n"
    '/* ✓😀 */ extern "C" __global__ void k(float* y) {\n'
    "    y[0] = 1.0f; // 𝛼 inside\n"
    "}\n"
    "// after\n"
)


@pytest.mark.parametrize("eol", ["\n", "\r\n"])
def test_kernel_range_replaces_exactly_the_kernel(eol: str):
    """Applying an edit over kernel_range (UTF-16) gives the same text as replacing the kernel's byte span."""
    text = SOURCE.replace("\n", eol)
    kernel = find_kernel(text, "k")
    rng = kernel_range(text, kernel)

    assert rng.start == types.Position(line=1, character=len("/* ✓ */ ") + 2)  # 😀: two UTF-16 units
    assert rng.end == types.Position(line=3, character=1)
    assert apply_edits(text, [types.TextEdit(range=rng, new_text="NEW")]) == replace_kernel(text, kernel, "NEW")


def test_position_counts_utf16_units():
    """😀 is two UTF-16 code units, one UTF-32 unit, four UTF-8 bytes."""
    text = "a😀b"
    offset = len("a😀".encode())
    assert position_at(text, offset).character == 3
    assert position_at(text, offset, types.PositionEncodingKind.Utf32).character == 2
    assert position_at(text, offset, types.PositionEncodingKind.Utf8).character == 5


def test_kernel_at_finds_the_enclosing_kernel_only():
    text = SOURCE
    inside = types.Position(line=2, character=6)
    outside = types.Position(line=4, character=0)
    assert kernel_at(text, types.Range(start=inside, end=inside))[0].name == "k"
    assert kernel_at(text, types.Range(start=outside, end=outside)) is None
