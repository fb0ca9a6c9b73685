// Sparse matrix-vector product y = A x with A [M, N] in CSR form: the nonzeros of row r are val[j] at column
// col[j] for rowptr[r] <= j < rowptr[r + 1] (val, col [NNZ]; rowptr [M + 1]), x [N], y [M].
// One thread per row, looping over its nonzeros.
extern "C" __global__ void spmv_csr(const int* rowptr, const int* col, const float* val, const float* x, float* y,
                                    int M, int N, int NNZ)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M) return;

    float s = 0.0f;
    for (int j = rowptr[r]; j < rowptr[r + 1]; j++)
        s += val[j] * x[col[j]];
    y[r] = s;
}
