import numpy as np

def rope_pairs(x, cos_t, sin_t, *, B, T, H, D):
    x = x.astype(np.float64)
    c = cos_t.astype(np.float64)[None, :, None, :]
    s = sin_t.astype(np.float64)[None, :, None, :]
    x0 = x[..., 0::2]
    x1 = x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = x0 * c - x1 * s
    out[..., 1::2] = x0 * s + x1 * c
    return out
