"""float64 reference of channel_softmax.cu: torch.softmax(x, dim=1) on NCHW."""
import numpy as np


def channel_softmax(x, y, *, N, C, H, W):
    assert x.shape == (N, C, H, W)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)
