// Batched matrix-vector product: y[b] = A[b] @ x[b]
// A: [batch, rows, cols], x: [batch, cols], y: [batch, rows]
// One thread per output row, batch index on blockIdx.y.
__global__ void bgemv_kernel(const float* A, const float* x, float* y,
                             int batch, int rows, int cols)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;  // output row
    int b = blockIdx.y;                             // batch
    if (i < rows && b < batch) {
        float acc = 0.0f;
        for (int k = 0; k < cols; ++k) {
            acc += A[(b * rows + i) * cols + k] * x[b * cols + k];
        }
        y[b * rows + i] = acc;
    }
}

void launch_bgemv(const float* A, const float* x, float* y, int batch, int rows, int cols)
{
    dim3 block(256);
    dim3 grid((rows + block.x - 1) / block.x, batch);
    bgemv_kernel<<<grid, block>>>(A, x, y, batch, rows, cols);
}
