// Softplus (torch.nn.functional.softplus, beta = 1, threshold = 20) over a huge 1-D float32 tensor.
// Grid-stride loop with size_t indices, grid capped at 65535 blocks.
#include <cstddef>

__global__ void softplus_gs(const float* __restrict__ x, float* __restrict__ y, size_t n)
{
    size_t stride = (size_t)blockDim.x * gridDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = x[i];
        if (v > 20.0f) {
            y[i] = v;
        } else {
            y[i] = log1pf(expf(v));
        }
    }
}

void launch_softplus_gs(const float* x, float* y, size_t n)
{
    int threads = 256;
    size_t blocks_needed = (n + threads - 1) / threads;
    int blocks = blocks_needed > 65535 ? 65535 : (int)blocks_needed;
    softplus_gs<<<blocks, threads>>>(x, y, n);
}
