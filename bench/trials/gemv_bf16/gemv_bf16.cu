#include <cuda_runtime.h>
#include <cuda_bf16.h>

// y = A x, A [M, K] bf16 row-major, x [K] bf16, fp32 accumulation, y f32: one thread per row
__global__ void gemv_bf16(const __nv_bfloat16* A, const __nv_bfloat16* x, float* y, int M, int K) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M) {
        float acc = 0.0f;
        for (int k = 0; k < K; k++) {
            acc += __bfloat162float(A[(size_t)row * K + k]) * __bfloat162float(x[k]);
        }
        y[row] = acc;
    }
}

void launch_gemv_bf16(const __nv_bfloat16* A, const __nv_bfloat16* x, float* y, int M, int K, cudaStream_t stream) {
    int threads = 128;
    int blocks = (M + threads - 1) / threads;
    gemv_bf16<<<blocks, threads, 0, stream>>>(A, x, y, M, K);
}
