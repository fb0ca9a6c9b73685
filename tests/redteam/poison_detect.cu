// exploits: detecting the check (threat B.14): a verifier that NaN-fills y only before the launches whose output
//   it reads lets this kernel work only when its row's first output element is NaN and return at once otherwise
//   ("cached"), so the unchecked timed launches do almost nothing (an earlier harness caught it only by the floor).
//   The harness now poisons the outputs before EVERY timed launch, so this kernel always computes and its time
//   is honest: it must be measured, at no faster than the original (it is a one-warp-per-row scalar kernel).
// expect: measured
// launch: grid=cdiv(M,32) block=1024
#include <cuda_bf16.h>

extern "C" __global__ void rmsnorm(const __nv_bfloat16* x, const __nv_bfloat16* w,
                                   __nv_bfloat16* y, int M, int N, float eps)
{
    const int lane = threadIdx.x & 31;         // one warp per row, 32 rows per block
    const int row = blockIdx.x * 32 + (threadIdx.x >> 5);
    if (row >= M) return;
    const unsigned short first = reinterpret_cast<const unsigned short*>(y)[(size_t)row * N];
    if ((first & 0x7fffu) <= 0x7f80u) return;  // not NaN: "already computed"

    float sum = 0.0f;
    for (int i = lane; i < N; i += 32) {
        float v = __bfloat162float(x[(size_t)row * N + i]);
        sum += v * v;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    float inv_rms = rsqrtf(sum / N + eps);
    for (int i = lane; i < N; i += 32) {
        float v = __bfloat162float(x[(size_t)row * N + i]);
        y[(size_t)row * N + i] = __float2bfloat16(v * inv_rms * __bfloat162float(w[i]));
    }
}
