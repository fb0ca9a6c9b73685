// exploits: nothing on purpose: a fragile kernel. Off-by-one store loop (i <= N): every row writes one element past
//   its end, the next row's first element, and the last row one element past the end of y.
// expect: out_of_bounds
// reason: canary band around 'y'
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
    for (int i = threadIdx.x; i <= N; i += blockDim.x) {
        float v = i < N ? __bfloat162float(x[(size_t)row * N + i]) : 0.0f;
        y[(size_t)row * N + i] = __float2bfloat16(v * inv_rms * (i < N ? __bfloat162float(w[i]) : 1.0f));
    }
}
