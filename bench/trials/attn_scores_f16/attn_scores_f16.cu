#include <cuda_fp16.h>

// Attention scores S[b, i, j] = scale * sum_d Q[b, i, d] * K[b, j, d]; Q, K [B, T, D] f16, S [B, T, T] f32
// (b runs over batch x heads). One thread per flat output (B * T * T threads, 1-D launch), fp32 accumulation.
__global__ void attn_scores_f16(const __half* Q, const __half* K, float* S, int B, int T, int D, float scale)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * T * T) return;
    int b = idx / (T * T);
    int i = (idx / T) % T;
    int j = idx % T;
    float acc = 0.0f;
    for (int d = 0; d < D; d++) {
        acc += __half2float(Q[(b * T + i) * D + d]) * __half2float(K[(b * T + j) * D + d]);
    }
    S[idx] = scale * acc;
}
