"""Output comparison, exact where exactness is defined: the one rule for "this output matches the reference".

Works on NumPy or CuPy arrays alike (the worker passes device arrays, so the comparison runs on the GPU
without a round trip through host memory; the CPU tests pass NumPy arrays). Buffers are in storage dtype
(bf16 as ``uint16`` bit patterns, see :mod:`ptxfactory.harness.buffers`).
"""
from __future__ import annotations

import numpy as np

from .buffers import STORAGE, unwritten


def _module(x):
    try:
        import cupy as cp

        return cp.get_array_module(x)
    except Exception:  # no CuPy: NumPy only
        return np


def values(buf, dtype: str, xp):
    """The buffer's values in a dtype that holds them exactly: bf16 bits widened to float32, f16 as float32,
    f32 and f64 as themselves, integers as themselves (never through a float)."""
    if dtype == "bf16":
        return (buf.astype(xp.uint32) << 16).view(xp.float32)
    if dtype == "f16":
        return buf.astype(xp.float32)
    return buf


def mismatches(got, want, dtype: str, rtol: float, atol: float):
    """Mask of the elements of ``got`` that do not match ``want`` (both flat, storage dtype ``dtype``).

    Integers: exactly equal, in their own dtype. Floats (f64 in f64, the others in float32, which holds
    them exactly): equal (so ``inf == inf`` and ``-inf == -inf``; an infinity matches nothing else), or both
    finite and ``|got - want| <= atol + rtol |want|``,
    or both NaN where ``got`` is a NaN the kernel wrote (an element still holding the poison payload
    where the reference computed a NaN was never written, and is wrong; where the reference left the
    element unwritten too, the two agree).
    """
    xp = _module(got)
    g, w = values(got, dtype, xp), values(want, dtype, xp)
    if np.dtype(STORAGE[dtype]).kind != "f" and dtype != "bf16":
        return g != w
    with np.errstate(invalid="ignore", over="ignore"):
        close = (g == w) | (xp.isfinite(g) & xp.isfinite(w) & (xp.abs(g - w) <= atol + rtol * xp.abs(w)))
    g_nan, w_nan = xp.isnan(g), xp.isnan(w)
    ok = (close & ~g_nan & ~w_nan) | (g_nan & w_nan & (~unwritten(got, dtype) | unwritten(want, dtype)))
    return ~ok


def max_abs_error(got, want, dtype: str) -> float:
    """The largest |got - want| over the elements where both are finite (0.0 for none), as a Python float."""
    xp = _module(got)
    g, w = values(got, dtype, xp), values(want, dtype, xp)
    if g.size == 0:
        return 0.0
    if np.dtype(STORAGE[dtype]).kind != "f" and dtype != "bf16":
        return float(xp.abs(g.astype(xp.int64) - w.astype(xp.int64)).max())
    finite = xp.isfinite(g) & xp.isfinite(w)
    with np.errstate(invalid="ignore", over="ignore"):
        return float(xp.max(xp.where(finite, xp.abs(g.astype(xp.float64) - w.astype(xp.float64)), 0)))


def magnitude_ratio(a, b, dtype: str) -> float:
    """How many times larger ``a``'s values are than ``b``'s (both flat, storage dtype ``dtype``): the ratio of their
    root mean squares over finite elements, at least 1.0; 1.0 for integer dtypes, empty buffers, or ``b`` all zero."""
    xp = _module(a)
    if (np.dtype(STORAGE[dtype]).kind != "f" and dtype != "bf16") or a.size == 0 or b.size == 0:
        return 1.0

    def rms(x) -> float:
        v = values(x, dtype, xp).astype(xp.float64)
        v = v[xp.isfinite(v)]
        return float(xp.sqrt(xp.mean(v * v))) if v.size else 0.0

    top, bottom = rms(a), rms(b)
    return max(1.0, top / bottom) if bottom > 0 and np.isfinite(top) else 1.0
