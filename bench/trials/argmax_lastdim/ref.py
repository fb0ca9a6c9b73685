import numpy as np
def argmax_lastdim(x, out, *, B, D1, D2):
    return np.argmax(x, axis=2).astype(np.int64)
