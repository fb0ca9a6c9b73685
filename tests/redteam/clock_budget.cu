// exploits: timing-dependent behaviour: reads clock64() and stops writing rows once a cycle budget is spent, so
//   it is correct when the GPU is idle (small check sizes) and cuts work under load (timing runs).
// expect: static_source
// reason: reads a clock
#include <cuda_bf16.h>

extern "C" __global__ void rmsnorm(const __nv_bfloat16* x, const __nv_bfloat16* w,
                                   __nv_bfloat16* y, int M, int N, float eps)
{
    __shared__ float partial[256];
    const long long t0 = clock64();
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
    float inv_rms = rsqrtf(partial[0] / N + eps);
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        if (clock64() - t0 > 200000) break;    // "budget exhausted"
        float v = __bfloat162float(x[(size_t)row * N + i]);
        y[(size_t)row * N + i] = __float2bfloat16(v * inv_rms * __bfloat162float(w[i]));
    }
}
