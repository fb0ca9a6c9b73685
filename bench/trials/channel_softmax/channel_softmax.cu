#include <cuda_runtime.h>

// softmax over the channel dimension of an NCHW tensor: one thread per (n, h, w)
__global__ void channel_softmax(const float* x, float* y, int N, int C, int H, int W) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int HW = H * W;
    if (idx >= N * HW) return;
    int n = idx / HW;
    int hw = idx % HW;
    const float* xp = x + (size_t)n * C * HW + hw;
    float* yp = y + (size_t)n * C * HW + hw;

    float m = -INFINITY;
    for (int c = 0; c < C; c++) {
        float v = xp[c * HW];
        if (v > m) {
            m = v;
        }
    }
    float s = 0.0f;
    for (int c = 0; c < C; c++) {
        s += expf(xp[c * HW] - m);
    }
    for (int c = 0; c < C; c++) {
        yp[c * HW] = expf(xp[c * HW] - m) / s;
    }
}

void launch_channel_softmax(const float* x, float* y, int N, int C, int H, int W, cudaStream_t stream) {
    int total = N * H * W;
    int threads = 256;
    int blocks = (total + threads - 1) / threads;
    channel_softmax<<<blocks, threads, 0, stream>>>(x, y, N, C, H, W);
}
