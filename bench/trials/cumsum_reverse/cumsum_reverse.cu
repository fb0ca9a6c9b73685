// Reverse cumulative sum along the last dim (KernelBench level 1, "cumsum_reverse"):
//   torch.cumsum(x.flip(1), 1).flip(1), i.e. y[b, j] = x[b, j] + x[b, j+1] + ... + x[b, N-1]
// x, y: [batch, n] float32, row-major. One thread per row, walking the row from the end.
__global__ void cumsum_reverse(const float* x, float* y, int batch, int n)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < batch) {
        float sum = 0.0f;
        for (int j = n - 1; j >= 0; j--) {
            sum += x[row * n + j];
            y[row * n + j] = sum;
        }
    }
}

void launch_cumsum_reverse(const float* x, float* y, int batch, int n, cudaStream_t stream)
{
    int threads = 256;
    int blocks = (batch + threads - 1) / threads;
    cumsum_reverse<<<blocks, threads, 0, stream>>>(x, y, batch, n);
}
