import numpy as np
def groupnorm_fwd(x, gamma, beta, y, *, N, C, HW, G, eps):
    xg = x.reshape(N, G, (C // G) * HW)
    mean = xg.mean(axis=2, keepdims=True)
    var = ((xg - mean) ** 2).mean(axis=2, keepdims=True)
    xhat = ((xg - mean) / np.sqrt(var + eps)).reshape(N, C, HW)
    return xhat * gamma[None, :, None] + beta[None, :, None]
