"""CUDA source text the family skeletons share: their ``.cu`` templates, and C expressions that move
floats in and out of packed 32-bit words (two bf16 or f16 values, or one f32, lowest address first)."""
from __future__ import annotations

import string
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=None)
def load_template(path: Path) -> string.Template:
    """A family's ``.cu`` template for ``string.Template``; lines starting with ``//!`` (notes to the
    template's reader) are dropped."""
    text = "".join(ln for ln in path.read_text().splitlines(keepends=True) if not ln.startswith("//!"))
    return string.Template(text)


def word_to_floats(dt: str, word: str) -> list[str]:
    """C expressions for the floats packed in the 32-bit word ``word`` of dtype ``dt`` (low half first)."""
    if dt == "bf16":
        return [f"__uint_as_float({word} << 16)", f"__uint_as_float({word} & 0xffff0000u)"]
    if dt == "f16":
        return [f"__half2float(__ushort_as_half((unsigned short)({word} & 0xffffu)))",
                f"__half2float(__ushort_as_half((unsigned short)({word} >> 16)))"]
    return [f"__uint_as_float({word})"]


def floats_to_word(dt: str, vals: list[str]) -> str:
    """The C expression packing ``vals`` (two floats for bf16/f16, rounded to nearest; one for f32) into a word."""
    if dt == "bf16":
        return f"((unsigned)__bfloat16_as_ushort(__float2bfloat16({vals[0]})) | ((unsigned)__bfloat16_as_ushort(__float2bfloat16({vals[1]})) << 16))"
    if dt == "f16":
        return f"((unsigned)__half_as_ushort(__float2half({vals[0]})) | ((unsigned)__half_as_ushort(__float2half({vals[1]})) << 16))"
    return f"__float_as_uint({vals[0]})"
