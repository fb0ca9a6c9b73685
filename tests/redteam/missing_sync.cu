// exploits: nothing on purpose: a fragile kernel. The __syncthreads() inside the shared-memory tree reduction is
//   dropped, so warps may read partial sums before other warps have written them (and partial[0] early). On the
//   H200 every check and held-out size passed (few blocks, one per SM: the warps stay in step); it showed only under
//   full occupancy, in the check of the last timed launch at M = 32768. Racy, so any of the three may catch it.
// expect: race|correctness|post_timing
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
        // missing: __syncthreads();
    }
    float inv_rms = rsqrtf(partial[0] / N + eps);
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        float v = __bfloat162float(x[(size_t)row * N + i]);
        y[(size_t)row * N + i] = __float2bfloat16(v * inv_rms * __bfloat162float(w[i]));
    }
}
