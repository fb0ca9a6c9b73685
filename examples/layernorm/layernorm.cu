// LayerNorm forward, bf16 in and out, fp32 math, as a newcomer writes it.
//   mean_r = sum_i x[r, i] / N,   var_r = sum_i (x[r, i] - mean_r)^2 / N   (biased, two-pass)
//   y[r, i] = (x[r, i] - mean_r) / sqrt(var_r + eps) * gamma[i] + beta[i]
//   x: [M, N] bf16 (row-major), gamma, beta: [N] bf16, y: [M, N] bf16; M, N: int; eps: float.
// Naive: one block of 256 threads per row whatever N is; scalar 2-byte loads and stores; two
// shared-memory tree reductions (mean, then variance) with a __syncthreads per step; x read three
// times from global memory; gamma and beta re-read by every row.
#include <cuda_bf16.h>

extern "C" __global__ void layernorm(const __nv_bfloat16* x, const __nv_bfloat16* gamma, const __nv_bfloat16* beta,
                                     __nv_bfloat16* y, int M, int N, float eps)
{
    __shared__ float partial[256];
    int row = blockIdx.x;
    if (row >= M) return;

    // pass 1: the mean
    float sum = 0.0f;
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        sum += __bfloat162float(x[(size_t)row * N + i]);
    }
    partial[threadIdx.x] = sum;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) {
            partial[threadIdx.x] += partial[threadIdx.x + stride];
        }
        __syncthreads();
    }
    float mean = partial[0] / N;
    __syncthreads();  // every thread has read partial[0] before it is reused below

    // pass 2: the variance around the mean
    float sq = 0.0f;
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        float d = __bfloat162float(x[(size_t)row * N + i]) - mean;
        sq += d * d;
    }
    partial[threadIdx.x] = sq;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) {
            partial[threadIdx.x] += partial[threadIdx.x + stride];
        }
        __syncthreads();
    }
    float inv_std = 1.0f / sqrtf(partial[0] / N + eps);

    // pass 3: normalise, scale and shift
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        float v = (__bfloat162float(x[(size_t)row * N + i]) - mean) * inv_std;
        y[(size_t)row * N + i] = __float2bfloat16(v * __bfloat162float(gamma[i]) + __bfloat162float(beta[i]));
    }
}
