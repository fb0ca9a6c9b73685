// A kernel template on its element type, for the tests of typename template parameters:
// y = a * x + b, VEC elements per thread, computed in float whatever T is.
#include <cuda_bf16.h>
#include <cstdint>

template <typename T, int VEC>
__global__ void axpb(const T* x, T* y, float a, float b, std::int32_t n)
{
    std::int32_t base = (blockIdx.x * blockDim.x + threadIdx.x) * VEC;
#pragma unroll
    for (int v = 0; v < VEC; ++v) {
        std::int32_t i = base + v;
        if (i < n) y[i] = T(a * float(x[i]) + b);
    }
}
