import numpy as np


def scatter_add(out, src, idx, *, T, D, V):
    res = out.copy()
    np.add.at(res, idx, src)                              # row t of src into row idx[t]; repeated indices accumulate
    return res
