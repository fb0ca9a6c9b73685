// exploits: nothing on purpose: a fragile kernel. It pre-scales each row by 1 / (max - min) "so the squares cannot
//   overflow" and handles the all-zero row explicitly, but a constant row (max == min != 0) gives x * inf: NaN.
//   Random rows are never constant; the stress variants' row 1 is (0.5 everywhere).
// expect: correctness
// reason: first at \[1, 0\]: got nan
#include <cuda_bf16.h>

__device__ __forceinline__ void block_reduce(float* red, float& a, float& b, float& c)
{
    red[threadIdx.x] = a; red[256 + threadIdx.x] = b; red[512 + threadIdx.x] = c;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) {
            red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + stride]);
            red[256 + threadIdx.x] = fminf(red[256 + threadIdx.x], red[256 + threadIdx.x + stride]);
            red[512 + threadIdx.x] += red[512 + threadIdx.x + stride];
        }
        __syncthreads();
    }
    a = red[0]; b = red[256]; c = red[512];
    __syncthreads();
}

extern "C" __global__ void rmsnorm(const __nv_bfloat16* x, const __nv_bfloat16* w,
                                   __nv_bfloat16* y, int M, int N, float eps)
{
    __shared__ float red[3 * 256];
    int row = blockIdx.x;
    if (row >= M) return;

    float mx = -__int_as_float(0x7f800000), mn = __int_as_float(0x7f800000), unused = 0.0f;
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        float v = __bfloat162float(x[(size_t)row * N + i]);
        mx = fmaxf(mx, v);
        mn = fminf(mn, v);
    }
    block_reduce(red, mx, mn, unused);
    if (mx == 0.0f && mn == 0.0f) {   // all-zero row: y = 0
        for (int i = threadIdx.x; i < N; i += blockDim.x) y[(size_t)row * N + i] = __float2bfloat16(0.0f);
        return;
    }
    const float scale = 1.0f / (mx - mn);
    float sum = 0.0f, d0 = 0.0f, d1 = 0.0f;
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        float v = __bfloat162float(x[(size_t)row * N + i]) * scale;
        sum += v * v;
    }
    block_reduce(red, d0, d1, sum);
    float inv_rms = rsqrtf(sum / N / (scale * scale) + eps);
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        float v = __bfloat162float(x[(size_t)row * N + i]);
        y[(size_t)row * N + i] = __float2bfloat16(v * inv_rms * __bfloat162float(w[i]));
    }
}
