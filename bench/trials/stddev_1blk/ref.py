import numpy as np


def stddev(data, result, *, N):
    m = data.mean()
    result[0] = m
    result[1] = np.sqrt(((data - m) ** 2).mean())
    return result
