// Bias + GELU (tanh approximation), bf16 in and out, fp32 math, as a newcomer writes it.
//   v = x[r, i] + b[i]
//   y[r, i] = 0.5 * v * (1 + tanh(sqrt(2 / pi) * (v + 0.044715 * v^3)))
//   x: [M, N] bf16 (row-major), b: [N] bf16, y: [M, N] bf16; M, N: int.
// Naive: one thread per element on a 1-D grid over all M * N elements; scalar 2-byte loads and
// stores; a 64-bit modulo per element to find the column of b; precise tanhf.
#include <cuda_bf16.h>

extern "C" __global__ void bias_gelu(const __nv_bfloat16* x, const __nv_bfloat16* b, __nv_bfloat16* y, int M, int N)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)M * N) return;

    int col = (int)(i % N);
    float v = __bfloat162float(x[i]) + __bfloat162float(b[col]);
    float inner = 0.7978845608f * (v + 0.044715f * v * v * v);
    y[i] = __float2bfloat16(0.5f * v * (1.0f + tanhf(inner)));
}
