import numpy as np


def sum_last2(inp, out, *, B, H, W):
    return inp.sum(axis=(1, 2))
