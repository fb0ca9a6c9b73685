// Causal softmax over the last dim of attention scores S[B, H, T, T], in place into P.
// One thread per row (b, h, i). Columns j > i are masked (-inf -> 0 after softmax).
#include <cuda_runtime.h>

__global__ void causal_softmax(const float* scores, float* probs, int B, int H, int T)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int total = B * H * T;
    if (idx >= total) return;

    int b = idx / (H * T);
    int h = (idx / T) % H;
    int i = idx % T;

    const float* row = scores + ((size_t)(b * H + h) * T + i) * T;
    float* out = probs + ((size_t)(b * H + h) * T + i) * T;

    float m = -INFINITY;
    for (int j = 0; j < T; j++) {
        float v = (j > i) ? -INFINITY : row[j];
        m = fmaxf(m, v);
    }
    float s = 0.0f;
    for (int j = 0; j < T; j++) {
        float v = (j > i) ? -INFINITY : row[j];
        s += expf(v - m);
    }
    for (int j = 0; j < T; j++) {
        float v = (j > i) ? -INFINITY : row[j];
        out[j] = expf(v - m) / s;
    }
}

void launch_causal_softmax(const float* scores, float* probs, int B, int H, int T, cudaStream_t st)
{
    int rows = B * H * T;
    int threads = 128;
    int blocks = (rows + threads - 1) / threads;
    causal_softmax<<<blocks, threads, 0, st>>>(scores, probs, B, H, T);
}
