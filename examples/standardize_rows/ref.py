"""The Python reference of standardize_rows.cu (spec: check.reference = "python:ref.py:standardize_rows").

Called in a child process with the kernel's buffers in the spec's argument order as float64 NumPy
arrays (x: [M, N], the bf16 inputs widened exactly; y: [M, N], mean and rstd: [M], pre-allocated) and
the size symbols and scalars as keywords (see harness/reference.py). Returns (y, mean, rstd); y is
the exact value, before any rounding to bf16.
"""
import numpy as np


def standardize_rows(x, y, mean, rstd, *, M, N, eps):
    """mean, biased variance (two-pass), rstd = 1/sqrt(var + eps), y = (x - mean) * rstd, in float64."""
    assert x.shape == (M, N) and y.shape == (M, N) and mean.shape == (M,) and rstd.shape == (M,)
    mu = x.mean(axis=1)
    d = x - mu[:, None]
    r = 1.0 / np.sqrt((d * d).mean(axis=1) + eps)
    return d * r[:, None], mu, r
