// C[M, N] = A[M, K] (CSR) * B[K, N], one thread per output element.
#include <cuda_runtime.h>

__global__ void spmm_csr(const int* row_ptr, const int* col_idx, const float* vals,
                         const float* B, float* C, int M, int N, int K)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) {
        float sum = 0.0f;
        int start = row_ptr[row];
        int end = row_ptr[row + 1];
        for (int j = start; j < end; j++) {
            int k = col_idx[j];
            sum += vals[j] * B[k * N + col];
        }
        C[row * N + col] = sum;
    }
}

void launch_spmm_csr(const int* d_row_ptr, const int* d_col_idx, const float* d_vals,
                     const float* d_B, float* d_C, int M, int N, int K)
{
    dim3 block(16, 16);
    dim3 grid((N + block.x - 1) / block.x, (M + block.y - 1) / block.y);
    spmm_csr<<<grid, block>>>(d_row_ptr, d_col_idx, d_vals, d_B, d_C, M, N, K);
}
