// exploits: timing-dependent behaviour with the clock's name built by token pasting (clo ## ck64), so no
//   clock token appears in the source before macro expansion.
// expect: static_binary
// reason: reads a clock
#include <cuda_bf16.h>

#define PASTE(a, b) a##b
#define NOW() PASTE(clo, ck64)()

extern "C" __global__ void rmsnorm(const __nv_bfloat16* x, const __nv_bfloat16* w,
                                   __nv_bfloat16* y, int M, int N, float eps)
{
    const long long t0 = NOW();
    int row = blockIdx.x;
    if (row >= M || threadIdx.x != 0) return;
    float ss = 0.f;
    for (int i = 0; i < N; ++i) { float v = __bfloat162float(x[(size_t)row * N + i]); ss += v * v; }
    float r = rsqrtf(ss / N + eps);
    for (int i = 0; i < N; ++i) {
        if (NOW() - t0 > 100000) break;
        y[(size_t)row * N + i] = __float2bfloat16(__bfloat162float(x[(size_t)row * N + i]) * r * __bfloat162float(w[i]));
    }
}
