// A kernel template for the tests of tune's template knobs: y = SCALE * x, UNROLL elements per thread and pass.
template <int UNROLL, int SCALE>
__global__ void scale(const float* x, float* y, int n)
{
    int stride = gridDim.x * blockDim.x;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + (UNROLL - 1) * stride < n; i += UNROLL * stride) {
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) y[i + u * stride] = SCALE * x[i + u * stride];
    }
    for (; i < n; i += stride) y[i] = SCALE * x[i];
}
