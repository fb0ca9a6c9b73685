"""The Python reference of stencil5.cu (spec: check.reference = "python:ref.py:stencil5").

Called in a child process with the kernel's buffers in the spec's argument order as float64 NumPy
arrays (u, rhs: [H, W]; u_new: [H, W], pre-allocated) and the size symbols as keywords (see
harness/reference.py). Returns u_new.
"""
import numpy as np


def stencil5(u, rhs, u_new, *, H, W):
    """One Jacobi step: the four-neighbour average less rhs / 4 inside, the boundary copied, in float64."""
    assert u.shape == rhs.shape == u_new.shape == (H, W)
    out = u.copy()  # the first and last row and column keep their values
    out[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - rhs[1:-1, 1:-1])
    return out
