// Int8 dequantization with one scale per row, as a newcomer writes it, with the fixed-width integer
// types of <cstdint>.
//   y[r, c] = float(q[r, c]) * scale[r]
//   q: [M, N] int8 (row-major), scale: [M] float, y: [M, N] float; M, N: int32_t.
// Naive: one thread per element, a 32-bit unsigned division to find the row, one byte loaded per thread.
#include <cstdint>

extern "C" __global__ void dequant_int8(const int8_t* q, const float* scale, float* y, int32_t M, int32_t N)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t total = (uint32_t)M * (uint32_t)N;
    if (i >= total) return;

    uint32_t row = i / (uint32_t)N;
    y[i] = (float)q[i] * scale[row];
}
