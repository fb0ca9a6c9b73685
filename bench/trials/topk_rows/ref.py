import numpy as np

TOPK = 8


def topk_rows(x, vals, idx, *, M, N):
    k = min(TOPK, N)
    order = np.argsort(-x, axis=1, kind="stable")[:, :k]    # descending; ties keep the lowest index first
    vals[:] = -np.inf                                        # fewer than 8 columns: the kernel leaves -inf, -1
    idx[:] = -1
    vals[:, :k] = np.take_along_axis(x, order, axis=1)
    idx[:, :k] = order.astype(np.int32)
    return vals, idx
