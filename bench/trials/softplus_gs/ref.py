import numpy as np
def softplus_gs(x, y, *, n):
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))
