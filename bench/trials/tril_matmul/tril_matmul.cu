// Matmul of two lower-triangular matrices (KernelBench level 1, "Matmul for lower triangular matrices"):
//   C = torch.tril(torch.matmul(A, B)), A and B [N, N] float32, lower triangular, row-major.
// One thread per output (i, j), 16x16 blocks. For j <= i only k in [j, i] can be nonzero
// (A[i][k] = 0 for k > i, B[k][j] = 0 for k < j), so the loop runs over that range; above the diagonal C is 0.
__global__ void tril_matmul(const float* A, const float* B, float* C, int N)
{
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < N && col < N) {
        if (col > row) {
            C[row * N + col] = 0.0f;
        } else {
            float sum = 0.0f;
            for (int k = col; k <= row; k++) {
                sum += A[row * N + k] * B[k * N + col];
            }
            C[row * N + col] = sum;
        }
    }
}

void launch_tril_matmul(const float* A, const float* B, float* C, int N, cudaStream_t stream)
{
    dim3 threads(16, 16);
    dim3 blocks((N + 15) / 16, (N + 15) / 16);
    tril_matmul<<<blocks, threads, 0, stream>>>(A, B, C, N);
}
