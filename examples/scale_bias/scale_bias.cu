// Scale and bias over rows, templated on its element type, as a newcomer writes it.
//   y[r, c] = T(alpha * float(x[r, c]) + float(bias[c]))
//   x: [M, N] T (row-major), bias: [N] T, y: [M, N] T; alpha: float; M, N: int.
// The spec instantiates it for bf16 (T = __nv_bfloat16); the arithmetic is done in float.
// Naive: one thread per element, an integer division and modulo to find the column.
#include <cuda_bf16.h>

template <typename T>
__global__ void scale_bias(const T* x, const T* bias, T* y, float alpha, int M, int N)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= M * N) return;

    int col = i % N;
    y[i] = T(alpha * float(x[i]) + float(bias[col]));
}
