import numpy as np


def bias_residual_relu(x, bias, residual, y, *, N, C):
    # the kernel rounds (x + b) to fp32 before adding r; in f64 the sum is exact-ish, well inside rtol
    return np.maximum(x + bias[None, :] + residual, 0.0)
