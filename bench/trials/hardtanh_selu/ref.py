import numpy as np
ALPHA = 1.6732632423543772
SCALE = 1.0507009873554805
def hardtanh_selu(x, y, *, batch_size, dim):
    return np.where(x > 0, SCALE * x, SCALE * ALPHA * np.expm1(np.minimum(x, 0)))
