// SwiGLU forward, bf16 in and out, fp32 math, as a first version is often written: one thread per
// output element.
//   a = x[r, c], b = x[r, H + c]   (the two halves of the last dimension)
//   out[r, c] = silu(a) * b = a / (1 + exp(-a)) * b
//   x: [M, 2H] bf16 (row-major), out: [M, H] bf16; M, H: int (M * H fits in an int).
// Naive: scalar 2-byte loads and stores, an integer division and a modulo per element, a precise
// expf and a division.
#include <cuda_bf16.h>

extern "C" __global__ void swiglu(const __nv_bfloat16* x, __nv_bfloat16* out, int M, int H)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= M * H) return;

    int r = idx / H;
    int c = idx % H;
    float a = __bfloat162float(x[(size_t)r * 2 * H + c]);
    float b = __bfloat162float(x[(size_t)r * 2 * H + H + c]);
    float silu = a / (1.0f + expf(-a));
    out[idx] = __float2bfloat16(silu * b);
}
