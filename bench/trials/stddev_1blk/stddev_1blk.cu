// Standard deviation (population) of a whole array, one block, two passes over the data:
// pass 1 the mean, pass 2 the mean of squared deviations. Thread 0 does the final division and stores.
#include <cuda_runtime.h>

__global__ void stddev_kernel(const float* data, float* result, int N)
{
    extern __shared__ float sbuf[];     // blockDim.x floats
    unsigned int t = threadIdx.x;
    unsigned int nt = blockDim.x;

    float acc = 0.0f;
    for (int i = t; i < N; i += nt)
        acc += data[i];
    sbuf[t] = acc;
    __syncthreads();
    for (unsigned int stride = nt / 2; stride > 0; stride >>= 1) {
        if (t < stride)
            sbuf[t] += sbuf[t + stride];
        __syncthreads();
    }
    float mean = sbuf[0] / (float)N;
    __syncthreads();

    float acc2 = 0.0f;
    for (int i = t; i < N; i += nt) {
        float d = data[i] - mean;
        acc2 += d * d;
    }
    sbuf[t] = acc2;
    __syncthreads();
    for (unsigned int stride = nt / 2; stride > 0; stride >>= 1) {
        if (t < stride)
            sbuf[t] += sbuf[t + stride];
        __syncthreads();
    }
    if (t == 0) {
        float var = sbuf[0] / (float)N;
        result[0] = mean;
        result[1] = sqrtf(var);
    }
}

// result[0] = mean, result[1] = std
void compute_stddev(const float* d_data, float* d_result, int N)
{
    int threads = 1024;
    stddev_kernel<<<1, threads, threads * sizeof(float)>>>(d_data, d_result, N);
}
