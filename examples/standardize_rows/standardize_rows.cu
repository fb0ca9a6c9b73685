// Row standardisation, bf16 in and out, fp32 math, as a first version is often written: one block of
// 256 threads per row that reads the row three times.
//   mean[r] = sum_i x[r, i] / N,   var_r = sum_i (x[r, i] - mean[r])^2 / N   (biased, two-pass)
//   rstd[r] = 1 / sqrt(var_r + eps),   y[r, i] = (x[r, i] - mean[r]) * rstd[r]
//   x: [M, N] bf16 (row-major), y: [M, N] bf16, mean, rstd: [M] f32 (kept for the backward pass);
//   M, N: int; eps: float.
// Naive: one block of 256 threads per row whatever N is; scalar 2-byte loads and stores; two
// shared-memory tree reductions with a __syncthreads per step; x read three times.
#include <cuda_bf16.h>

extern "C" __global__ void standardize_rows(const __nv_bfloat16* x, __nv_bfloat16* y, float* mean, float* rstd,
                                            int M, int N, float eps)
{
    __shared__ float partial[256];
    int row = blockIdx.x;
    if (row >= M) return;
    const __nv_bfloat16* xr = x + (size_t)row * N;

    // pass 1: the mean
    float sum = 0.0f;
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        sum += __bfloat162float(xr[i]);
    }
    partial[threadIdx.x] = sum;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) {
            partial[threadIdx.x] += partial[threadIdx.x + stride];
        }
        __syncthreads();
    }
    float mu = partial[0] / N;
    __syncthreads();  // every thread has read partial[0] before it is reused below

    // pass 2: the variance around the mean
    float sq = 0.0f;
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        float d = __bfloat162float(xr[i]) - mu;
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
    float r = 1.0f / sqrtf(partial[0] / N + eps);

    // pass 3: standardise
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        y[(size_t)row * N + i] = __float2bfloat16((__bfloat162float(xr[i]) - mu) * r);
    }
    if (threadIdx.x == 0) {
        mean[row] = mu;
        rstd[row] = r;
    }
}
