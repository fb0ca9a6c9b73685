import numpy as np


def masked_cumsum(x, mask, out, *, rows, len):
    return np.cumsum(np.where(mask != 0, x, 0.0), axis=1)
