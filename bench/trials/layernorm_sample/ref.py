import numpy as np


def layernorm_sample(x, gamma, beta, y, *, N, C, H, W, eps):
    # nn.LayerNorm((C, H, W)): statistics over all of a sample's C * H * W values, biased variance
    xs = x.reshape(N, -1)
    mean = xs.mean(axis=1, keepdims=True)
    var = ((xs - mean) ** 2).mean(axis=1, keepdims=True)
    out = (xs - mean) / np.sqrt(var + eps) * gamma.reshape(1, -1) + beta.reshape(1, -1)
    return out.reshape(N, C, H, W)
