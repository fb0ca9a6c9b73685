import numpy as np
def mean_dim1(x, out, *, B, D1, D2):
    return x.mean(axis=1)
