// C = diag(d) @ B, d [N], B [N, M], C [N, M]: row i of B scaled by d[i]. One thread per output, flat index.
__global__ void diag_matmul(const float* d, const float* B, float* C, int N, int M)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < N * M) {
        int i = idx / M;
        int j = idx % M;
        C[i * M + j] = d[i] * B[i * M + j];
    }
}

void launch_diag_matmul(const float* d, const float* B, float* C, int N, int M)
{
    int threads = 256;
    int blocks = (N * M + threads - 1) / threads;
    diag_matmul<<<blocks, threads>>>(d, B, C, N, M);
}
