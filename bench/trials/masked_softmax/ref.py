import numpy as np
def masked_softmax(S, P, *, BH, T):
    s = S.reshape(BH, T, T)
    mask = np.tril(np.ones((T, T), dtype=bool))
    z = np.where(mask, s, -np.inf)
    e = np.exp(z - z.max(axis=2, keepdims=True))
    return (e / e.sum(axis=2, keepdims=True)).reshape(BH * T, T)
