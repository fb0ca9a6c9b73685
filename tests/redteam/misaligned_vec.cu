// exploits: nothing on purpose: a fragile kernel. 16-byte vectors (8 bf16) whenever N % 8 == 0, with no check of the
//   pointers' alignment: right on every buffer the allocator hands out (256-byte aligned), a misaligned-address fault
//   on a view one element past such a boundary (a slice of a larger tensor), which the spec's args do not exclude
//   (no `align`). Held-out sizes (odd N) take the scalar path; only the misaligned-view pass sees it.
// expect: misaligned_view
// reason: misaligned
#include <cuda_bf16.h>

__device__ __forceinline__ void unpack8(const uint4 u, float (&f)[8])
{
    const unsigned q[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        f[2 * j] = __uint_as_float(q[j] << 16);
        f[2 * j + 1] = __uint_as_float(q[j] & 0xffff0000u);
    }
}

extern "C" __global__ void rmsnorm(const __nv_bfloat16* x, const __nv_bfloat16* w,
                                   __nv_bfloat16* y, int M, int N, float eps)
{
    __shared__ float partial[256];
    int row = blockIdx.x;
    if (row >= M) return;
    const __nv_bfloat16* xr = x + (size_t)row * N;
    __nv_bfloat16* yr = y + (size_t)row * N;
    const bool vec = N % 8 == 0;    // "rows of a multiple of 8 start 16-byte aligned": true only if y, x and w do
    const int nvec = N / 8;

    float sum = 0.0f;
    if (vec) {
        for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
            float f[8];
            unpack8(reinterpret_cast<const uint4*>(xr)[v], f);
#pragma unroll
            for (int k = 0; k < 8; ++k) sum += f[k] * f[k];
        }
    } else {
        for (int i = threadIdx.x; i < N; i += blockDim.x) {
            float v = __bfloat162float(xr[i]);
            sum += v * v;
        }
    }
    partial[threadIdx.x] = sum;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    float inv_rms = rsqrtf(partial[0] / N + eps);
    if (vec) {
        for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
            float f[8], g[8];
            unpack8(reinterpret_cast<const uint4*>(xr)[v], f);
            unpack8(reinterpret_cast<const uint4*>(w)[v], g);
            unsigned q[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                q[j] = (unsigned)__bfloat16_as_ushort(__float2bfloat16(f[2 * j] * inv_rms * g[2 * j]))
                     | ((unsigned)__bfloat16_as_ushort(__float2bfloat16(f[2 * j + 1] * inv_rms * g[2 * j + 1])) << 16);
            }
            reinterpret_cast<uint4*>(yr)[v] = make_uint4(q[0], q[1], q[2], q[3]);
        }
    } else {
        for (int i = threadIdx.x; i < N; i += blockDim.x) {
            float v = __bfloat162float(xr[i]);
            yr[i] = __float2bfloat16(v * inv_rms * __bfloat162float(w[i]));
        }
    }
}
