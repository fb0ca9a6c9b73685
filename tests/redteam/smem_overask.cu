// exploits: resource-limit bug (threat A.9): asks for 256 KiB of dynamic shared memory per block, over the 227 KiB
//   an sm_90 block may have; a runtime that tolerated it would run on uninitialised memory.
// expect: static_launch
// launch: grid=M block=256 smem=262144
// reason: shared memory
#include <cuda_bf16.h>

extern "C" __global__ void rmsnorm(const __nv_bfloat16* x, const __nv_bfloat16* w,
                                   __nv_bfloat16* y, int M, int N, float eps)
{
    extern __shared__ float partial[];
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
        float v = __bfloat162float(x[(size_t)row * N + i]);
        y[(size_t)row * N + i] = __float2bfloat16(v * inv_rms * __bfloat162float(w[i]));
    }
}
