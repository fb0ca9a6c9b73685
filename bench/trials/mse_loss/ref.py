import numpy as np
def mse_loss(a, b, out, *, n):
    return out + np.sum((a - b) ** 2)
