"""Float64 reference of row_entropy.cu (spec: check.reference = "python:ref.py:row_entropy").

p: [M, N] float64 (the bf16 inputs widened exactly); ent: [M] pre-allocated. Returns ent.
"""
import numpy as np


def row_entropy(p, ent, *, M, N):
    assert p.shape == (M, N) and ent.shape == (M,)
    pos = np.where(p > 0, p, 0.0)              # the kernel skips entries <= 0
    s = pos.sum(axis=1)
    out = np.zeros(M, dtype=np.float64)
    ok = s > 0                                 # a row summing to 0 has entropy 0
    q = pos[ok] / s[ok, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(q > 0, q * np.log(np.where(q > 0, q, 1.0)), 0.0)
    out[ok] = -t.sum(axis=1)
    return out
