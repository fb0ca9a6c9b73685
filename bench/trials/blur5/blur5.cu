// Horizontal 5-tap blur of a float image [H, W], clamped borders.
#include <cuda_runtime.h>

__global__ void blur5(const float* in, const float* w, float* out, int H, int W)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= W || y >= H) return;

    float acc = 0.0f;
    for (int k = 0; k < 5; k++) {
        int xx = min(max(x + k - 2, 0), W - 1);
        acc += w[k] * in[y * W + xx];
    }
    out[y * W + x] = acc;
}

void launch_blur5(const float* d_in, const float* d_w, float* d_out, int H, int W, cudaStream_t stream)
{
    dim3 block(16, 16);
    dim3 grid((W + block.x - 1) / block.x, (H + block.y - 1) / block.y);
    blur5<<<grid, block, 0, stream>>>(d_in, d_w, d_out, H, W);
}
