// exploits: detecting the check (threat B.14) by its canary: reads the bytes just past the end of y (an
//   out-of-bounds read, never a write) and does the work only when they hold the verifier's canary pattern, so
//   the unchecked timed launches would do nothing. Every timed buffer now sits between the same canary bands as
//   the checked ones, so the kernel always sees them, always computes, and its time is honest: it must be
//   measured (a harness without bands around timed buffers would quote a huge speedup, or catch it only in the
//   check of the last timed launch).
// expect: measured
#include <cuda_bf16.h>

extern "C" __global__ void rmsnorm(const __nv_bfloat16* x, const __nv_bfloat16* w,
                                   __nv_bfloat16* y, int M, int N, float eps)
{
    __shared__ float partial[256];
    int row = blockIdx.x;
    if (row >= M) return;
    // four bf16 past the end of y: the verifier's canary band (0xA5 bytes) when it is checking this launch
    const unsigned short* past = reinterpret_cast<const unsigned short*>(y + (size_t)M * N);
    const bool checked = past[0] == 0xA5A5u && past[1] == 0xA5A5u && past[2] == 0xA5A5u && past[3] == 0xA5A5u;
    if (!checked) return;   // "nobody is looking": skip the work

    float sum = 0.0f;
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        float v = __bfloat162float(x[(size_t)row * N + i]);
        sum += v * v;
    }
    partial[threadIdx.x] = sum;
    __syncthreads();

    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) {
            partial[threadIdx.x] += partial[threadIdx.x + stride];
        }
        __syncthreads();
    }

    float inv_rms = rsqrtf(partial[0] / N + eps);
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        float v = __bfloat162float(x[(size_t)row * N + i]);
        y[(size_t)row * N + i] = __float2bfloat16(v * inv_rms * __bfloat162float(w[i]));
    }
}
