"""The Python reference of rowsum_ptx.ptx (spec: check.reference = "python:ref.py:rowsum").

Called in a child process with the kernel's buffers in the spec's argument order as float64 NumPy arrays
(x: [M, N], s: [M], pre-allocated) and the size symbols and scalars as keywords (see harness/reference.py).
"""
import numpy as np


def rowsum(x: np.ndarray, s: np.ndarray, *, M: int, N: int) -> np.ndarray:
    """s[r] = sum of x[r, :], in float64 (pairwise: the exact sum for fp32 inputs, to ~1e-16 relative)."""
    assert x.shape == (M, N) and s.shape == (M,)
    return x.sum(axis=1)
