// exploits: input mutation (threat A.2): casts away const and zeroes x after using it, so a reference that runs
//   afterwards on the same buffer computes the trivial all-zero answer too.
// expect: input_mutated
// reason: input 'x' was modified
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
    float inv_rms = rsqrtf(partial[0] / N + eps);
    __nv_bfloat16* xm = const_cast<__nv_bfloat16*>(x);
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        float v = __bfloat162float(x[(size_t)row * N + i]);
        y[(size_t)row * N + i] = __float2bfloat16(v * inv_rms * __bfloat162float(w[i]));
        xm[(size_t)row * N + i] = __float2bfloat16(0.0f);
    }
}
