// exploits: output side channel: a printf left in the kernel (slows it, floods the worker's stdout, and is a
//   channel for faking result lines, threat B.15).
// expect: static_source
// reason: printf
#include <cuda_bf16.h>

extern "C" __global__ void rmsnorm(const __nv_bfloat16* x, const __nv_bfloat16* w,
                                   __nv_bfloat16* y, int M, int N, float eps)
{
    __shared__ float partial[256];
    int row = blockIdx.x;
    if (row >= M) return;

    float sum = 0.0f;
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        float v = __bfloat162float(x[(size_t)row * N + i]);
        sum += v * v;
    }
    partial[threadIdx.x] = sum;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    if (row == 0 && threadIdx.x == 0) printf("rmsnorm: row 0 sum of squares %f\n", partial[0]);
    float inv_rms = rsqrtf(partial[0] / N + eps);
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        float v = __bfloat162float(x[(size_t)row * N + i]);
        y[(size_t)row * N + i] = __float2bfloat16(v * inv_rms * __bfloat162float(w[i]));
    }
}
