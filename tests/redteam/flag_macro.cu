// exploits: the device_flag.cu launch counter with __device__ spelled through a macro, which the source-level
//   static check (tree-sitter on unexpanded source) does not see. Caught at run time: a second run on the same
//   inputs finds the flag set and leaves y NaN-filled.
// expect: static_source
#include <cuda_bf16.h>

#define PERSISTENT __device__
PERSISTENT unsigned int ptxf_calls;

extern "C" __global__ void rmsnorm(const __nv_bfloat16* x, const __nv_bfloat16* w,
                                   __nv_bfloat16* y, int M, int N, float eps)
{
    __shared__ float partial[256];
    int row = blockIdx.x;
    if (row >= M || *(volatile unsigned int*)&ptxf_calls > 0) return;

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
    if (row == 0 && threadIdx.x == 0) atomicAdd(&ptxf_calls, 1u);
}
