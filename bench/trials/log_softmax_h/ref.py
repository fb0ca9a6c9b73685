import numpy as np


def log_softmax_h(x, y, *, M, N):
    m = x.max(axis=1, keepdims=True)
    return x - (m + np.log(np.exp(x - m).sum(axis=1, keepdims=True)))
