import numpy as np


def adam_step(p, g, m, v, *, lr, beta1, beta2, eps, bc1, bc2):
    # the scalars arrive as the float32 values the kernel gets; 1 - beta is exact in float32 for beta in [0.5, 1]
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    p = p - lr * (m / bc1) / (np.sqrt(v / bc2) + eps)
    return p, m, v
