"""The Python reference of rope.cu (spec: check.reference = "python:ref.py:rope").

Called in a child process with the kernel's buffers in the spec's argument order as float64 NumPy
arrays (x: [T, H, D], the bf16 inputs widened exactly; cos_t, sin_t: [T, D/2]; out: [T, H, D],
pre-allocated) and the size symbols as keywords (see harness/reference.py). Returns out, exact
(before any rounding to bf16).
"""
import numpy as np


def rope(x, cos_t, sin_t, out, *, T, H, D):
    """Rotate-half RoPE: (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin), the halves of the head dimension."""
    assert D % 2 == 0 and x.shape == (T, H, D) and cos_t.shape == (T, D // 2) and sin_t.shape == (T, D // 2)
    half = D // 2
    c, s = cos_t[:, None, :], sin_t[:, None, :]  # one angle per token and position in the half, shared by heads
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)
