// GELU (exact, erf form) of x [rows, cols] float32, y = 0.5 * x * (1 + erf(x / sqrt(2))).
// 2-D launch: x over columns, y over rows, 16 x 16 blocks.
__device__ float gelu(float v)
{
    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

__global__ void gelu_erf_2d(const float* x, float* y, int rows, int cols)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < rows && col < cols) {
        int idx = row * cols + col;
        y[idx] = gelu(x[idx]);
    }
}

void launch_gelu_erf_2d(const float* x, float* y, int rows, int cols)
{
    dim3 block(16, 16);
    dim3 grid((cols + block.x - 1) / block.x, (rows + block.y - 1) / block.y);
    gelu_erf_2d<<<grid, block>>>(x, y, rows, cols);
}
