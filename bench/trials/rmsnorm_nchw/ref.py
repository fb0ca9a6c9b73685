import numpy as np


def rmsnorm_nchw(x, weight, y, *, N, C, H, W, eps):
    rms = np.sqrt((x * x).mean(axis=1, keepdims=True) + eps)
    return x / rms * weight.reshape(1, C, 1, 1)
