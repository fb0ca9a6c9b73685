import math
import numpy as np
_erf = np.vectorize(math.erf)
def geglu_mlp(x, W1, W2, h, *, M, N, K):
    a = x @ W1
    g = x @ W2
    return 0.5 * a * (1.0 + _erf(a / math.sqrt(2.0))) * g
