"""The Python reference of dot_atomic.cu (spec: check.reference = "python:ref.py:dot_atomic").

Called in a child process with the kernel's buffers in the spec's argument order as float64 NumPy
arrays (x, y: [N]; out: [1], holding its value before the launch: it is inout, zeroed) and the size
symbol as a keyword (see harness/reference.py). Returns out after the launch.
"""
import numpy as np


def dot_atomic(x, y, out, *, N):
    """out + x . y in float64 (exact products of fp32 values; the sum to ~1e-16 relative)."""
    assert x.shape == y.shape == (N,) and out.shape == (1,)
    return out + np.dot(x, y)
