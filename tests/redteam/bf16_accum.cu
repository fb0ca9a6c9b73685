// exploits: precision downgrade (threat A.5): each thread accumulates its sum of squares in __nv_bfloat16 (8-bit
//   mantissa). 64 threads per row: the error stays under 0.3% on every spec size and grows with the row length,
//   failing (about 4%) only on the held-out long row (N = 8x the largest checked, odd).
// expect: correctness
// launch: grid=cdiv(M,4) block=256
// reason: held-out size \{'M': 3, 'N': \d+\}
#include <cuda_bf16.h>

extern "C" __global__ void rmsnorm(const __nv_bfloat16* x, const __nv_bfloat16* w,
                                   __nv_bfloat16* y, int M, int N, float eps)
{
    __shared__ float red[8];
    const int t = threadIdx.x & 63;            // 64 threads (two warps) per row, 4 rows per block
    const int row = blockIdx.x * 4 + (threadIdx.x >> 6);
    const bool active = row < M;

    __nv_bfloat16 acc = __float2bfloat16(0.0f);
    if (active) {
        for (int i = t; i < N; i += 64) {
            float v = __bfloat162float(x[(size_t)row * N + i]);
            acc = __float2bfloat16(__bfloat162float(acc) + v * v);
        }
    }
    float s = __bfloat162float(acc);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
    __syncthreads();
    if (!active) return;
    const int first = (threadIdx.x >> 6) * 2;
    float inv_rms = rsqrtf((red[first] + red[first + 1]) / N + eps);
    for (int i = t; i < N; i += 64) {
        float v = __bfloat162float(x[(size_t)row * N + i]);
        y[(size_t)row * N + i] = __float2bfloat16(v * inv_rms * __bfloat162float(w[i]));
    }
}
