// Row-wise log-softmax, fp16 in/out, float math.
#include <cuda_fp16.h>

__global__ void log_softmax_h(const __half* x, __half* y, int M, int N)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M) return;

    const __half* xr = x + (size_t)row * N;
    __half* yr = y + (size_t)row * N;

    float mx = -INFINITY;
    for (int j = 0; j < N; j++) {
        mx = fmaxf(mx, __half2float(xr[j]));
    }
    float sum = 0.0f;
    for (int j = 0; j < N; j++) {
        sum += expf(__half2float(xr[j]) - mx);
    }
    float lse = mx + logf(sum);
    for (int j = 0; j < N; j++) {
        yr[j] = __float2half(__half2float(xr[j]) - lse);
    }
}

void launch_log_softmax_h(const __half* x, __half* y, int M, int N, cudaStream_t stream)
{
    int threads = 128;
    int blocks = (M + threads - 1) / threads;
    log_softmax_h<<<blocks, threads, 0, stream>>>(x, y, M, N);
}
