// exploits: an out-of-bounds write 4 KiB past the end of y, beyond a 256-byte canary band (the bands are 64 KiB): the off-by-a-lot
//   twin of oob_write.cu. Nothing notices it unless it lands on a buffer the harness reads; on the H200 the
//   candidate was measured. A far write could also reach harness buffers (other outputs, the baseline's).
// expect: out_of_bounds
// (was a known gap with 256-byte canary bands; the bands are 64 KiB now)
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
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        float v = __bfloat162float(x[(size_t)row * N + i]);
        y[(size_t)row * N + i] = __float2bfloat16(v * inv_rms * __bfloat162float(w[i]));
    }
    if (row == M - 1 && threadIdx.x == 0) y[(size_t)M * N + 2048] = __float2bfloat16(1.0f);
}
