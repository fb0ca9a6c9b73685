"""The Python reference of swiglu.cu (spec: check.reference = "python:ref.py:swiglu").

Called in a child process with the kernel's buffers in the spec's argument order as float64 NumPy
arrays (x: [M, 2H], the bf16 inputs widened exactly; out: [M, H], pre-allocated) and the size symbols
as keywords (see harness/reference.py). Returns out, exact (before any rounding to bf16).
"""
import numpy as np


def swiglu(x, out, *, M, H):
    """out = silu(a) * b with a, b the two halves of x's last dimension; silu(a) = a * sigmoid(a), in float64."""
    assert x.shape == (M, 2 * H) and out.shape == (M, H)
    a, b = x[:, :H], x[:, H:]
    sigmoid = 0.5 * (1.0 + np.tanh(0.5 * a))  # = 1 / (1 + exp(-a)), without overflow for large |a|
    return a * sigmoid * b
