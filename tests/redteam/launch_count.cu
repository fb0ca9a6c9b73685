// exploits: detecting the timing phase without clocks (threat B.14): a __device__ counter of launches (atomicAdd by
//   block 0); after the first 48 launches, the ones a verifier makes before it starts timing, every block returns
//   at once. Refused before any run (a written device global); at run time every timed launch gets poisoned
//   outputs and the last one is checked, so it would fail as post_timing.
// expect: static_source
// reason: (mutable __device__|device) global
#include <cuda_bf16.h>

__device__ unsigned int ptxf_launches = 0;

extern "C" __global__ void rmsnorm(const __nv_bfloat16* x, const __nv_bfloat16* w,
                                   __nv_bfloat16* y, int M, int N, float eps)
{
    __shared__ float partial[256];
    int row = blockIdx.x;
    if (row >= M) return;
    __shared__ unsigned int launches;
    if (threadIdx.x == 0) {
        launches = row == 0 ? atomicAdd(&ptxf_launches, 1u) : *(volatile unsigned int*)&ptxf_launches;
    }
    __syncthreads();
    if (launches > 48) return;   // verification is over after ~48 launches: the timed ones do nothing

    float sum = 0.0f;
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        float v = __bfloat162float(x[(size_t)row * N + i]);
        sum += v * v;
    }
    partial[threadIdx.x] = sum;
    __syncthreads();

    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) {
            partial[threadIdx.x] += partial[threadIdx.x + stride];
        }
        __syncthreads();
    }

    float inv_rms = rsqrtf(partial[0] / N + eps);
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        float v = __bfloat162float(x[(size_t)row * N + i]);
        y[(size_t)row * N + i] = __float2bfloat16(v * inv_rms * __bfloat162float(w[i]));
    }
}
