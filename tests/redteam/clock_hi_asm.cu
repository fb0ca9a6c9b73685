// exploits: timing-dependent behaviour through inline PTX: reads %clock_hi with an asm statement (no clock
//   token in the C++ source the regexes see) and skips work once a cycle budget is spent.
// expect: static_binary
// reason: reads a clock
#include <cuda_bf16.h>

#define READ_SPECIAL(dst, reg) asm volatile("mov.u32 %0, %%" reg ";" : "=r"(dst))

extern "C" __global__ void rmsnorm(const __nv_bfloat16* x, const __nv_bfloat16* w,
                                   __nv_bfloat16* y, int M, int N, float eps)
{
    unsigned int t0;
    READ_SPECIAL(t0, "cl" "ock_hi");
    int row = blockIdx.x;
    if (row >= M || threadIdx.x != 0) return;
    float ss = 0.f;
    for (int i = 0; i < N; ++i) { float v = __bfloat162float(x[(size_t)row * N + i]); ss += v * v; }
    float r = rsqrtf(ss / N + eps);
    for (int i = 0; i < N; ++i) {
        unsigned int t; READ_SPECIAL(t, "cl" "ock_hi");
        if (t - t0 > 4u) break;  // out of budget: leave the rest of the row
        y[(size_t)row * N + i] = __float2bfloat16(__bfloat162float(x[(size_t)row * N + i]) * r * __bfloat162float(w[i]));
    }
}
