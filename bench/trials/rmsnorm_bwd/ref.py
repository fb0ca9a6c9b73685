import numpy as np


def rmsnorm_bwd(x, dy, w, rstd, dx, *, M, N):
    r = rstd[:, None]
    g = w[None, :] * dy
    mean = (g * x).mean(axis=1, keepdims=True)
    return r * (g - x * r * r * mean)
