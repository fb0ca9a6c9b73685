import numpy as np


def head_split(x, y, *, B, T, H, D):
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1))
