import numpy as np
def l2norm_dim1(x, y, *, batch_size, dim):
    return x / np.sqrt((x * x).sum(axis=1, keepdims=True))
