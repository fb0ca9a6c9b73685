import numpy as np


# float64 sum over dimension 1 of x [B, D, N] (the helper's reference, 2026-12-05)
def sum_dim1(x, out, *, B, D, N):
    return x.sum(axis=1)
