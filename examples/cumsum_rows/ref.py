"""The Python reference of cumsum_rows.cu (spec: check.reference = "python:ref.py:cumsum_rows").

Called in a child process with the kernel's buffers in the spec's argument order as float64 NumPy
arrays (x: [M, N]; y: [M, N], pre-allocated) and the size symbols as keywords (see
harness/reference.py). Returns the outputs (y) in argument order.
"""
import numpy as np


def cumsum_rows(x, y, *, M, N):
    """y[r, j] = sum of x[r, :j + 1], in float64."""
    assert x.shape == (M, N) and y.shape == (M, N)
    return np.cumsum(x, axis=1)
