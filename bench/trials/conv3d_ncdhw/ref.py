import numpy as np
def conv3d_ncdhw(x, w, y, *, N, C, D, H, W, OC):
    OD, OH, OW = D - 2, H - 2, W - 2
    out = np.zeros((N, OC, OD, OH, OW))
    for kd in range(3):
        for kh in range(3):
            for kw in range(3):
                out += np.einsum("ncdhw,oc->nodhw", x[:, :, kd:kd + OD, kh:kh + OH, kw:kw + OW], w[:, :, kd, kh, kw])
    return out
