import numpy as np
def spmv_ell(val, col, x, y, *, M, N, K):
    return (val * x[col]).sum(axis=1)
