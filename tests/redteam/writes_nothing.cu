// exploits: stale output (threat A.1): does the reduction but never stores y, relying on the output buffer's old
//   contents (an allocator-recycled reference result passes a naive checker). Near-zero time.
// expect: correctness
// reason: never written
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
    (void)w; (void)y; (void)eps;   // y "is already there"
}
