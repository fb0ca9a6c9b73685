// exploits: cross-call state hidden where the static checks cannot see it: a "done" flag in the two bytes just past
//   the end of y (pointer arithmetic, no __device__ global). Later calls that find the flag skip all work.
// expect: out_of_bounds
// reason: canary band around 'y'
#include <cuda_bf16.h>

extern "C" __global__ void rmsnorm(const __nv_bfloat16* x, const __nv_bfloat16* w,
                                   __nv_bfloat16* y, int M, int N, float eps)
{
    __shared__ float partial[256];
    volatile unsigned short* done = reinterpret_cast<unsigned short*>(y + (size_t)M * N);   // one past the end
    int row = blockIdx.x;
    if (row >= M || *done == 0x5EED) return;

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
    if (row == 0 && threadIdx.x == 0) *done = 0x5EED;
}
