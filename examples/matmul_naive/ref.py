"""The Python reference of matmul_naive.cu (spec: check.reference = "python:ref.py:matmul_naive").

Called in a child process with the kernel's buffers in the spec's argument order as float64 NumPy
arrays (A: [M, K], B: [K, N]; C: [M, N], pre-allocated) and the size symbols as keywords (see
harness/reference.py). Returns C.
"""
import numpy as np


def matmul_naive(A, B, C, *, M, N, K):
    """C = A @ B in float64."""
    assert A.shape == (M, K) and B.shape == (K, N) and C.shape == (M, N)
    return A @ B
