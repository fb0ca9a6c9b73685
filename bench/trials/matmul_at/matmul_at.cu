// C = A^T B: A [K, M] (stored transposed, as torch.matmul(A.T, B) sees it), B [K, N], C [M, N].
// 2-D launch, one thread per output, 16 x 16 blocks.
__global__ void matmul_at(const float* A, const float* B, float* C, int M, int K, int N)
{
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M && col < N) {
        float sum = 0.0f;
        for (int k = 0; k < K; ++k) {
            sum += A[k * M + row] * B[k * N + col];
        }
        C[row * N + col] = sum;
    }
}

void launch_matmul_at(const float* A, const float* B, float* C, int M, int K, int N)
{
    dim3 block(16, 16);
    dim3 grid((N + block.x - 1) / block.x, (M + block.y - 1) / block.y);
    matmul_at<<<grid, block>>>(A, B, C, M, K, N);
}
