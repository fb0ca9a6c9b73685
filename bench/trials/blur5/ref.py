import numpy as np


def blur5(inp, w, out, *, H, W):
    """out[y, x] = sum_k w[k] * in[y, clamp(x + k - 2, 0, W - 1)], in float64."""
    cols = np.arange(W)
    res = np.zeros((H, W), dtype=np.float64)
    for k in range(5):
        xx = np.clip(cols + k - 2, 0, W - 1)
        res += w[k] * inp[:, xx]
    return res
