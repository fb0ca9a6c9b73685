// exploits: cross-call result caching keyed by address (threat B.13, the CUDA-L1 / "pointer cache" hack): the last
//   input pointer seen lives in a __device__ global; a launch whose x is that pointer returns at once, leaving y as
//   the previous call wrote it. A harness that reuses its buffers across timed calls times nothing.
//   Refused before any run (a written device global); at run time it would fail too: every verification run gets
//   fresh buffers with NaN-poisoned outputs, and the outputs of the last timed launch are checked.
// expect: static_source
// reason: (mutable __device__|device) global
#include <cuda_bf16.h>

__device__ const __nv_bfloat16* ptxf_last_x = nullptr;

extern "C" __global__ void rmsnorm(const __nv_bfloat16* x, const __nv_bfloat16* w,
                                   __nv_bfloat16* y, int M, int N, float eps)
{
    __shared__ float partial[256];
    int row = blockIdx.x;
    if (row >= M || x == ptxf_last_x) return;   // "the same input as last time: y already holds the answer"

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
    if (row == M - 1 && threadIdx.x == 0) ptxf_last_x = x;
}
