import numpy as np


def attn_decode(q, k, v, out, *, B, H, T, scale):
    # q [B, H, D], k/v [B, T, H, D] -> out [B, H, D]
    s = np.einsum("bhd,bthd->bht", q, k) * scale
    s -= s.max(axis=2, keepdims=True)
    p = np.exp(s)
    p /= p.sum(axis=2, keepdims=True)
    out[:] = np.einsum("bht,bthd->bhd", p, v)
    return out
