"""The Python reference of histogram.cu (spec: check.reference = "python:ref.py:histogram").

Called in a child process with the kernel's buffers in the spec's argument order (x: [N] float64 holding
fp32 values; hist: [B] int64, its value before the launch: it is inout, zeroed) and the size symbols as
keywords (see harness/reference.py). Returns hist after the launch.
"""
import numpy as np


def histogram(x, hist, *, N, B):
    """hist + the count of each bin b = (int)(x * B) clamped to [0, B - 1], the product rounded in float32 as the
    kernel rounds it (so a value on a bin's edge lands where the kernel puts it)."""
    assert x.shape == (N,) and hist.shape == (B,)
    scaled = x.astype(np.float32) * np.float32(B)
    b = np.clip(np.trunc(scaled.astype(np.float64)), 0, B - 1).astype(np.int64)
    return hist + np.bincount(b, minlength=B)
