"""The Python reference of l2norm_rows.cu (spec: check.reference = "python:ref.py:l2norm_rows").

Called in a child process with the kernel's buffers in the spec's argument order as float64 NumPy
arrays (x: [M, N]; y: [M, N] and norm: [M], pre-allocated) and the size symbols and scalars as
keywords (see harness/reference.py). Returns the outputs (y, norm) in argument order.
"""
import numpy as np


def l2norm_rows(x, y, norm, *, M, N, eps):
    """norm[r] = sqrt(sum x[r, :]^2 + eps), y = x / norm[r], in float64 (the exact answer for fp32 inputs to ~1e-16)."""
    assert x.shape == (M, N) and y.shape == (M, N) and norm.shape == (M,)
    n = np.sqrt(np.einsum("ij,ij->i", x, x) + eps)
    return x / n[:, None], n
