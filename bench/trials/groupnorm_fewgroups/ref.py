import numpy as np


def groupnorm_fewgroups(x, gamma, beta, y, *, N, C, H, W, G, eps):
    # per (sample, group of C / G channels): mean and biased variance over (C / G) * H * W values
    xg = x.reshape(N, G, -1)
    mean = xg.mean(axis=2, keepdims=True)
    var = ((xg - mean) ** 2).mean(axis=2, keepdims=True)
    xhat = ((xg - mean) / np.sqrt(var + eps)).reshape(N, C, H, W)
    return xhat * gamma[None, :, None, None] + beta[None, :, None, None]
