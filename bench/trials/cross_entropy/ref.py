import numpy as np

def cross_entropy(logits, labels, loss, *, M, V):
    x = logits.astype(np.float64)
    mx = x.max(axis=1)
    lse = np.log(np.exp(x - mx[:, None]).sum(axis=1)) + mx
    return lse - x[np.arange(M), labels.astype(np.int64)]
