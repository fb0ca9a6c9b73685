import numpy as np

def attn(q, k, v, out, *, B, H, T):
    s = np.einsum("bhid,bhjd->bhij", q, k) / np.sqrt(64.0)
    s -= s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(axis=-1, keepdims=True)
    return np.einsum("bhij,bhjd->bhid", p, v)
