import numpy as np
def instancenorm2d(x, y, *, N, C, H, W, eps):
    xp = x.reshape(N, C, H * W)
    mean = xp.mean(axis=2, keepdims=True)
    var = ((xp - mean) ** 2).mean(axis=2, keepdims=True)
    return ((xp - mean) / np.sqrt(var + eps)).reshape(N, C, H, W)
