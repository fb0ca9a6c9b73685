import numpy as np
def tensor4d_matmul(A, B, C, *, Bt, I, J, L, K):
    return np.einsum("bijl,lk->bijk", A, B)
