import numpy as np
def nbody(x, y, z, m, acc, *, N, eps2):
    p = np.stack([x, y, z], axis=1).astype(np.float64)  # (N, 3), float64 (the buffers arrive in their f32)
    m = m.astype(np.float64)
    out = np.zeros((N, 3))
    for s in range(0, N, 1024):                          # blocks of i keep the (bi, N, 3) temporaries small
        d = p[None, :, :] - p[s:s + 1024, None, :]       # d[i, j] = p[j] - p[i]
        r2 = (d * d).sum(axis=2) + eps2
        w = m[None, :] / (r2 * np.sqrt(r2))
        out[s:s + 1024] = (d * w[:, :, None]).sum(axis=1)
    return out
