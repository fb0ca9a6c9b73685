"""float64 reference of cumsum_reverse.cu: torch.cumsum(x.flip(1), 1).flip(1)."""
import numpy as np


def cumsum_reverse(x, y, *, batch, n):
    assert x.shape == (batch, n)
    return np.cumsum(x[:, ::-1], axis=1)[:, ::-1].copy()
