import numpy as np


def spmv_csr(rowptr, col, val, x, y, *, M, N, NNZ):
    # row r sums val[j] * x[col[j]] over rowptr[r] <= j < rowptr[r + 1], an empty range (rowptr[r + 1] <= rowptr[r])
    # giving 0, as the kernel's loop does; the rows' ranges may overlap (see the spec), so the sums are taken as
    # differences of one float64 prefix sum (|prefix| <= NNZ * max|term|: its rounding, ~1e-16 relative, is far
    # below the fp32 tolerances)
    lo = rowptr[:-1].astype(np.int64)
    hi = rowptr[1:].astype(np.int64)
    prefix = np.concatenate(([0.0], np.cumsum(val * x[col])))
    return np.where(hi > lo, prefix[hi] - prefix[np.minimum(lo, hi)], 0.0)
