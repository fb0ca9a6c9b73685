// exploits: resource-limit bug (threat A.9): 1024-thread blocks, each thread caching 64 floats of its row in
//   registers with no __launch_bounds__: ptxas gives it more than 64 registers, and 1024 x that exceeds the 64K
//   register file of an SM, so the launch cannot run at all.
// expect: static_resources
// launch: grid=M block=1024
// reason: register file
#include <cuda_bf16.h>

#define CACHE 64

extern "C" __global__ void rmsnorm(const __nv_bfloat16* x, const __nv_bfloat16* w,
                                   __nv_bfloat16* y, int M, int N, float eps)
{
    __shared__ float red[32];
    const int row = blockIdx.x;
    if (row >= M) return;
    const __nv_bfloat16* xr = x + (size_t)row * N;
    float c[CACHE];
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < CACHE; ++k) {
        const int i = threadIdx.x + k * 1024;
        c[k] = i < N ? __bfloat162float(xr[i]) : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < CACHE; ++k) sum += c[k] * c[k];
    for (int i = threadIdx.x + CACHE * 1024; i < N; i += 1024) {
        float v = __bfloat162float(xr[i]);
        sum += v * v;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = sum;
    __syncthreads();
    float total = 0.0f;
#pragma unroll
    for (int k = 0; k < 32; ++k) total += red[k];
    const float inv_rms = rsqrtf(total / N + eps);
#pragma unroll
    for (int k = 0; k < CACHE; ++k) {
        const int i = threadIdx.x + k * 1024;
        if (i < N) y[(size_t)row * N + i] = __float2bfloat16(c[k] * inv_rms * __bfloat162float(w[i]));
    }
    for (int i = threadIdx.x + CACHE * 1024; i < N; i += 1024) {
        float v = __bfloat162float(xr[i]);
        y[(size_t)row * N + i] = __float2bfloat16(v * inv_rms * __bfloat162float(w[i]));
    }
}
