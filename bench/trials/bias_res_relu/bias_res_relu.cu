// "Fused" y = relu(x + bias[c] + residual) over [N, C], 2-D launch (c on x, n on y).
__global__ void bias_residual_relu(const float* x, const float* bias, const float* residual,
                                   float* y, int N, int C)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < N && col < C) {
        float v = x[row * C + col] + bias[col] + residual[row * C + col];
        y[row * C + col] = fmaxf(v, 0.0f);
    }
}

void launch_bias_residual_relu(const float* x, const float* bias, const float* residual,
                               float* y, int N, int C)
{
    dim3 block(32, 8);
    dim3 grid((C + block.x - 1) / block.x, (N + block.y - 1) / block.y);
    bias_residual_relu<<<grid, block>>>(x, bias, residual, y, N, C);
}
