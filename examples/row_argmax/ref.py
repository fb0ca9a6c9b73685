"""The Python reference of row_argmax.cu (spec: check.reference = "python:ref.py:row_argmax").

Called in a child process with the kernel's buffers in the spec's argument order (x: [M, N] float64,
the fp32 inputs exactly; vmax: [M] float64 and imax: [M] int32, pre-allocated) and the size symbols as
keywords (see harness/reference.py). Returns (vmax, imax).
"""
import numpy as np


def row_argmax(x, vmax, imax, *, M, N):
    """The max of each row and the first index where it occurs (np.argmax returns the first on ties)."""
    assert x.shape == (M, N) and vmax.shape == (M,) and imax.shape == (M,)
    i = np.argmax(x, axis=1)
    return x[np.arange(M), i], i.astype(np.int32)
