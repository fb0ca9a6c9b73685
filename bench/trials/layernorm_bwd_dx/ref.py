import numpy as np
def layernorm_bwd_dx(dy, x, mean, rstd, gamma, dx, *, M, N):
    g = dy * gamma[None, :]
    xhat = (x - mean[:, None]) * rstd[:, None]
    s1 = g.mean(axis=1, keepdims=True)
    s2 = (g * xhat).mean(axis=1, keepdims=True)
    return (g - s1 - xhat * s2) * rstd[:, None]
