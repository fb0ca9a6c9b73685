import numpy as np


def spmv_csr(rowptr, col, val, x, y, *, M, N, R):
    # row r sums val[j] * x[col[j]] over rowptr[r] <= j < rowptr[r + 1] (rowptr never decreases: offsets), taken as
    # differences of one float64 prefix sum (|prefix| <= 2 R M max|term|: its rounding, ~1e-16 relative, is far below
    # the fp32 tolerances); an empty row gives 0
    lo = rowptr[:-1].astype(np.int64)
    hi = rowptr[1:].astype(np.int64)
    prefix = np.concatenate(([0.0], np.cumsum(val * x[col])))
    return prefix[hi] - prefix[lo]
