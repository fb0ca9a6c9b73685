import numpy as np


def mean_pool_tokens(x, y, *, B, T, C):
    return x.mean(axis=1)
