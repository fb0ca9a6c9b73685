import numpy as np


def maxpool1d_k2s2(input, output, *, N, C, L, L_out):
    x = input[:, :, : 2 * L_out].reshape(N, C, L_out, 2)
    return x.max(axis=3)
