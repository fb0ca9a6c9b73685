#include <cuda_runtime.h>

// y = x / ||x||_F in two kernels: the sum of squares (one atomicAdd per element), then the division
__global__ void frobenius_sumsq(const float* x, float* norm2, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        atomicAdd(norm2, v * v);
    }
}

__global__ void frobenius_div(const float* x, const float* norm2, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float nrm = sqrtf(norm2[0]);
        y[i] = x[i] / nrm;
    }
}

void launch_frobenius_norm(const float* x, float* norm2, float* y, int n, cudaStream_t stream) {
    int threads = 256;
    int blocks = (n + threads - 1) / threads;
    cudaMemsetAsync(norm2, 0, sizeof(float), stream);
    frobenius_sumsq<<<blocks, threads, 0, stream>>>(x, norm2, n);
    frobenius_div<<<blocks, threads, 0, stream>>>(x, norm2, y, n);
}
