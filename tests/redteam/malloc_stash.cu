// exploits: state across launches through the device heap: the first launch mallocs a stash and publishes its
//   address through a pointer smuggled in the output's tail; later launches could replay from it. Device
//   malloc in the kernel is refused from the compiled code, whatever the spelling.
// expect: static_binary
// reason: allocates device memory
#include <cuda_bf16.h>

__device__ void* grab(size_t n) { return malloc(n); }

extern "C" __global__ void rmsnorm(const __nv_bfloat16* x, const __nv_bfloat16* w,
                                   __nv_bfloat16* y, int M, int N, float eps)
{
    int row = blockIdx.x;
    if (row >= M || threadIdx.x != 0) return;
    float* stash = (float*)grab(sizeof(float) * 4);
    float ss = 0.f;
    for (int i = 0; i < N; ++i) { float v = __bfloat162float(x[(size_t)row * N + i]); ss += v * v; }
    if (stash) { stash[0] = ss; ss = stash[0]; }
    float r = rsqrtf(ss / N + eps);
    for (int i = 0; i < N; ++i)
        y[(size_t)row * N + i] = __float2bfloat16(__bfloat162float(x[(size_t)row * N + i]) * r * __bfloat162float(w[i]));
}
