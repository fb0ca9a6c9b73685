import math
import numpy as np
_erf = np.vectorize(math.erf, otypes=[np.float64])
def gelu_erf_2d(x, y, *, rows, cols):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))
