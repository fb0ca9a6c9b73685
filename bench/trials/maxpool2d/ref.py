import numpy as np
def maxpool2d(x, y, *, N, C, H, W, K, S):
    OH, OW = (H - K) // S + 1, (W - K) // S + 1
    out = np.full((N, C, OH, OW), -np.inf)
    for kh in range(K):
        for kw in range(K):
            out = np.maximum(out, x[:, :, kh:kh + S * (OH - 1) + 1:S, kw:kw + S * (OW - 1) + 1:S])
    return out
