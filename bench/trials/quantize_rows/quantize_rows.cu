// Per-row symmetric int8 quantisation of x [M, N] (f32, row-major): scale = max |x| of the row / 127 (1 when the
// row is all zeros), q [M, N] = x / scale rounded to nearest (ties to even) and clamped to [-127, 127], scales [M].
// One thread per row: one loop for the absmax, one writing q.
#include <cstdint>

extern "C" __global__ void quantize_rows(const float* x, int8_t* q, float* scales, int M, int N)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M) return;

    float amax = 0.0f;
    for (int j = 0; j < N; j++) {
        float v = fabsf(x[row * N + j]);
        if (v > amax) amax = v;
    }
    float scale = amax / 127.0f;
    if (amax == 0.0f) scale = 1.0f;

    for (int j = 0; j < N; j++) {
        int v = __float2int_rn(x[row * N + j] / scale);
        if (v > 127) v = 127;
        if (v < -127) v = -127;
        q[row * N + j] = (int8_t)v;
    }
    scales[row] = scale;
}
