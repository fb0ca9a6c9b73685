"""The Python reference of colsum.cu (spec: check.reference = "python:ref.py:colsum").

Called in a child process with the kernel's buffers in the spec's argument order as float64 NumPy
arrays (x: [M, N], the fp32 inputs exactly; out: [N], pre-allocated) and the size symbols as keywords
(see harness/reference.py). Returns out.
"""
import numpy as np


def colsum(x, out, *, M, N):
    """out[c] = sum over rows of x[:, c], in float64 (the exact answer for fp32 inputs to ~1e-16 of sum |x|)."""
    assert x.shape == (M, N) and out.shape == (N,)
    return x.sum(axis=0)
