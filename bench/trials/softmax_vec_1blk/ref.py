import numpy as np


def softmax_vec(inp, out, *, n):
    e = np.exp(inp - inp.max())
    return e / e.sum()
