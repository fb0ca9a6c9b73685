"""float64 reference of block_sum: out[0] += sum(x * w)."""
import numpy as np


def block_sum(x, w, out):
    return out + np.dot(x, w)
