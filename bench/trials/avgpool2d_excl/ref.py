import numpy as np
def avgpool2d_excl(x, y, *, N, C, H, W):
    OH, OW = (H + 1) // 2, (W + 1) // 2
    xp = np.zeros((N, C, H + 2, W + 2)); xp[:, :, 1:H + 1, 1:W + 1] = x
    ones = np.zeros((H + 2, W + 2)); ones[1:H + 1, 1:W + 1] = 1
    s = np.zeros((N, C, OH, OW)); c = np.zeros((OH, OW))
    for i in range(3):
        for j in range(3):
            s += xp[:, :, i:i + 2 * OH - 1:2, j:j + 2 * OW - 1:2]
            c += ones[i:i + 2 * OH - 1:2, j:j + 2 * OW - 1:2]
    return s / c
