import numpy as np
def logsoftmax_rows(x, y, *, batch, dim):
    m = x.max(axis=1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))
