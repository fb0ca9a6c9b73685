import numpy as np


def array_sum(x, out, *, n):
    out[0] = x.sum()          # float64 (pairwise) sum of the exact inputs
    return out
