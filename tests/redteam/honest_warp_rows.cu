// exploits: nothing: an honest rewrite (one warp per row, 8 rows per 256-thread block, fp32 accumulation, warp
//   shuffles instead of shared memory) with its own launch. It must be measured: a verifier that rejects an
//   honest kernel with a different launch and reduction order is as broken as one that accepts everything.
// expect: measured
// launch: grid=cdiv(M,8) block=256
#include <cuda_bf16.h>

extern "C" __global__ void rmsnorm(const __nv_bfloat16* x, const __nv_bfloat16* w,
                                   __nv_bfloat16* y, int M, int N, float eps)
{
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * 8 + (threadIdx.x >> 5);
    if (row >= M) return;                       // whole warps leave together: no barrier below

    const __nv_bfloat16* xr = x + (size_t)row * N;
    float sum = 0.0f;
    for (int i = lane; i < N; i += 32) {
        float v = __bfloat162float(xr[i]);
        sum += v * v;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    const float inv_rms = rsqrtf(sum / N + eps);
    for (int i = lane; i < N; i += 32) {
        float v = __bfloat162float(xr[i]);
        y[(size_t)row * N + i] = __float2bfloat16(v * inv_rms * __bfloat162float(w[i]));
    }
}
