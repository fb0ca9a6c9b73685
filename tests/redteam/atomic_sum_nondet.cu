// exploits: nothing on purpose: atomic_sum.cu's kernel under check.deterministic = false (the spec allows
//   non-deterministic reductions): adds
//   every square of a row into one shared float with atomicAdd (threat: a reduction whose rounding depends on
//   the order the warps happen to run in). Within the tolerance every time, never the same bits twice for sure.
//   Each rerun is then judged against the oracle by the tolerance, and it passes: it must be measured.
// check: deterministic=false
// expect: measured
#include <cuda_bf16.h>

extern "C" __global__ void rmsnorm(const __nv_bfloat16* x, const __nv_bfloat16* w,
                                   __nv_bfloat16* y, int M, int N, float eps)
{
    __shared__ float total;
    int row = blockIdx.x;
    if (row >= M) return;
    if (threadIdx.x == 0) total = 0.0f;
    __syncthreads();

    // every square added straight into one shared float: the order of the adds (so the rounding) is whatever
    // order the warps reach their atomics in, which changes from run to run
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        float v = __bfloat162float(x[(size_t)row * N + i]);
        atomicAdd(&total, v * v);
    }
    __syncthreads();

    float inv_rms = rsqrtf(total / N + eps);
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        float v = __bfloat162float(x[(size_t)row * N + i]);
        y[(size_t)row * N + i] = __float2bfloat16(v * inv_rms * __bfloat162float(w[i]));
    }
}
