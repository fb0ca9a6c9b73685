// exploits: nothing on purpose: a fragile kernel. One store 66 KiB past the end of y, beyond a fixed 64 KiB canary
//   band: it lands in whatever the allocator put there (free memory, or another buffer). The bands now grow with
//   the buffer (64 KiB plus its own size), so at every check size but the smallest the store lands in y's band.
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
    // 66 KiB past the end of y: beyond a fixed 64 KiB canary band
    if (row == M - 1 && threadIdx.x == 0) y[(size_t)M * N + 33 * 1024] = __float2bfloat16(1.0f);
}
