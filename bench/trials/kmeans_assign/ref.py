import numpy as np


def kmeans_assign(x, c, assign, dist, *, N, K, D):
    best = np.empty(N, dtype=np.int32)
    best_d = np.empty(N)
    for s in range(0, N, 256):                            # blocks of points keep the (bn, K, D) temporary small
        diff = x[s:s + 256, None, :] - c[None, :, :]
        d = (diff * diff).sum(axis=2)                     # (bn, K) squared distances
        k = d.argmin(axis=1)                              # the first minimum: ties go to the lowest index
        best[s:s + 256] = k
        best_d[s:s + 256] = d[np.arange(len(k)), k]
    return best, best_d
