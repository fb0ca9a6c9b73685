import numpy as np


def cdist(a, b, out, *, M, N, D):
    out = np.empty((M, N))
    rows = max(1, (1 << 22) // max(1, N * D))               # blocks of rows keep the (bm, N, D) temporary small
    for s in range(0, M, rows):
        diff = a[s:s + rows, None, :] - b[None, :, :]
        out[s:s + rows] = (diff * diff).sum(axis=2)
    return out
