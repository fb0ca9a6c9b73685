// Rotary position embedding (RoPE), rotate-half convention, bf16 activations with fp32 tables, as a
// first version is often written: one thread per token, looping over its heads and head dimension.
//   for i < D/2:  out[t, h, i]       = x[t, h, i] * cos[t, i] - x[t, h, i + D/2] * sin[t, i]
//                 out[t, h, i + D/2] = x[t, h, i + D/2] * cos[t, i] + x[t, h, i] * sin[t, i]
//   x, out: [T, H, D] bf16 (row-major), cos_t, sin_t: [T, D/2] f32 (the angles of token t's position);
//   T, H, D: int, D even.
// Naive: one thread per token does H * D/2 rotations alone: neighbouring threads read addresses
// H * D elements apart, with 2-byte loads and stores, and only cdiv(T, 128) blocks.
#include <cuda_bf16.h>

extern "C" __global__ void rope(const __nv_bfloat16* x, const float* cos_t, const float* sin_t, __nv_bfloat16* out,
                                int T, int H, int D)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;

    int half = D / 2;
    for (int h = 0; h < H; ++h) {
        const __nv_bfloat16* xv = x + ((size_t)t * H + h) * D;
        __nv_bfloat16* ov = out + ((size_t)t * H + h) * D;
        for (int i = 0; i < half; ++i) {
            float c = cos_t[(size_t)t * half + i];
            float s = sin_t[(size_t)t * half + i];
            float x1 = __bfloat162float(xv[i]);
            float x2 = __bfloat162float(xv[i + half]);
            ov[i] = __float2bfloat16(x1 * c - x2 * s);
            ov[i + half] = __float2bfloat16(x2 * c + x1 * s);
        }
    }
}
