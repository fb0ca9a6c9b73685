import numpy as np


def row_mean_max(x, mean_out, max_out, *, B, N):
    return x.mean(axis=1), x.max(axis=1)
