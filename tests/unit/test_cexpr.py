"""CPU tests of the shared C expression helpers (harness/cexpr.py) that the red team of 2026-12-05 found short: an
octal literal's value, and the names written through a select or a comma expression."""
from __future__ import annotations

import pytest

from ptxfactory.harness import cexpr
from ptxfactory.search.generators.transform import syntax as sx


def _expr(text: str):
    root = sx.parse(f"void f() {{ {text}; }}".encode()).root_node
    return next(n for n in sx.walk(root) if n.type == "expression_statement").named_children[0]


@pytest.mark.parametrize("text, value", [("010", 8), ("0", 0), ("10", 10), ("-7", -7), ("0x10", 16), ("1.5f", 1.5)])
def test_literal_values_read_as_c_reads_them(text, value):
    root = sx.parse(f"int a = {text};".encode()).root_node
    lit = next(n for n in sx.walk(root) if n.type == "number_literal")
    assert cexpr.literal_value(lit) == value


@pytest.mark.parametrize("text, written", [
    ("(c ? z : e)++", {"z", "e"}),
    ("(z, e) += 1", {"e"}),
    ("((c) ? (a) : (d ? b : e)) = 3", {"a", "b", "e"}),
    ("x[i] = 1", set()),        # (through a pointer: the pointer itself is not written)
    ("k = 1", {"k"}),
])
def test_names_written_through_selects_and_commas(text, written):
    assert cexpr.written_names(_expr(text)) == written


@pytest.mark.parametrize("text, value", [
    ("512 / 2", 256), ("(1 << 8)", 256), ("-7 / 2", -3), ("-7 % 2", -1), ("(int)(3 * 4 - 1)", 11), ("0x10 >> 2", 4),
    ("010 + 1", 9), ("n / 2", None), ("1.5f * 2", None), ("4 / 0", None), ("blockDim.x / 2", None),
])
def test_integer_constant_expressions_fold_as_c_folds_them(text, value):
    assert cexpr.int_constant(_expr(text)) == value
