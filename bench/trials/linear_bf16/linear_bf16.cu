#include <cuda_bf16.h>

// y = gelu_tanh(x @ W^T + b): x [M, K] bf16, W [N, K] bf16 (torch.nn.Linear's layout), b [N] f32, y [M, N] bf16.
// fp32 accumulation. One thread per output, 2-D launch of 16 x 16 blocks (x over n, y over m).
__device__ float gelu_tanh(float v)
{
    const float k0 = 0.7978845608028654f;   // sqrt(2 / pi)
    const float k1 = 0.044715f;
    return 0.5f * v * (1.0f + tanhf(k0 * (v + k1 * v * v * v)));
}

__global__ void linear_bf16(const __nv_bfloat16* x, const __nv_bfloat16* W, const float* b, __nv_bfloat16* y,
                            int M, int N, int K)
{
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    int m = blockIdx.y * blockDim.y + threadIdx.y;
    if (m < M && n < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; k++) {
            acc += __bfloat162float(x[m * K + k]) * __bfloat162float(W[n * K + k]);
        }
        acc += b[n];
        y[m * N + n] = __float2bfloat16(gelu_tanh(acc));
    }
}
