// Row softmax, bf16 in and out, fp32 math, as a newcomer writes it.
//   y[r, i] = exp(x[r, i] - m_r) / sum_j exp(x[r, j] - m_r),   m_r = max_j x[r, j]
//   x: [M, N] bf16 (row-major), y: [M, N] bf16; M, N: int.
// Naive: one block of 256 threads per row whatever N is; scalar 2-byte loads and stores; two
// shared-memory tree reductions (the max, then the sum) with a __syncthreads per step; x read
// three times from global memory and expf evaluated twice per element; a division per element.
#include <cuda_bf16.h>

extern "C" __global__ void softmax(const __nv_bfloat16* x, __nv_bfloat16* y, int M, int N)
{
    __shared__ float partial[256];
    int row = blockIdx.x;
    if (row >= M) return;

    // pass 1: the row's maximum
    float m = __int_as_float(0xff800000);  // -infinity (NVRTC has no INFINITY macro)
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        m = fmaxf(m, __bfloat162float(x[(size_t)row * N + i]));
    }
    partial[threadIdx.x] = m;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) {
            partial[threadIdx.x] = fmaxf(partial[threadIdx.x], partial[threadIdx.x + stride]);
        }
        __syncthreads();
    }
    float row_max = partial[0];
    __syncthreads();  // every thread has read partial[0] before it is reused below

    // pass 2: the sum of exp(x - max)
    float sum = 0.0f;
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        sum += expf(__bfloat162float(x[(size_t)row * N + i]) - row_max);
    }
    partial[threadIdx.x] = sum;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) {
            partial[threadIdx.x] += partial[threadIdx.x + stride];
        }
        __syncthreads();
    }
    float row_sum = partial[0];

    // pass 3: normalise (x read a third time, exp computed again)
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        float e = expf(__bfloat162float(x[(size_t)row * N + i]) - row_max);
        y[(size_t)row * N + i] = __float2bfloat16(e / row_sum);
    }
}
