import numpy as np

def gru_cell(xg, hg, h, hy, *, B, H):
    xr, xz, xn = xg[:, :H], xg[:, H:2 * H], xg[:, 2 * H:]
    hr, hz, hn = hg[:, :H], hg[:, H:2 * H], hg[:, 2 * H:]
    r = 1.0 / (1.0 + np.exp(-(xr + hr)))
    z = 1.0 / (1.0 + np.exp(-(xz + hz)))
    n = np.tanh(xn + r * hn)
    return (1.0 - z) * n + z * h
