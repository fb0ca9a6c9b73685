import numpy as np
def conv_transpose1d(x, w, bias, y, *, N, Cin, Cout, L):
    full = np.zeros((N, Cout, 2 * L + 3))
    for k in range(3):
        full[:, :, 2 * k:2 * k + 2 * L - 1:2] += np.einsum("ncl,co->nol", x, w[:, :, k])
    return full[:, :, 1:2 * L + 2] + bias[None, :, None]
