// Softmax over a whole 1-D vector of n floats, done by a single block of 512 threads.
// step 1: max by a shared-memory tree, step 2: sum of exp(x - max) by a tree, step 3: normalised write.
#include <cuda_runtime.h>
#include <float.h>

#define BLOCK 512

__global__ void softmax_vec_1blk(const float* in, float* out, int n)
{
    __shared__ float red[BLOCK];
    int tid = threadIdx.x;

    // 1. max
    float m = -FLT_MAX;
    for (int i = tid; i < n; i += BLOCK) {
        m = fmaxf(m, in[i]);
    }
    red[tid] = m;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s /= 2) {
        if (tid < s) {
            red[tid] = fmaxf(red[tid], red[tid + s]);
        }
        __syncthreads();
    }
    float vmax = red[0];
    __syncthreads();

    // 2. sum of exps
    float sum = 0.0f;
    for (int i = tid; i < n; i += BLOCK) {
        sum += expf(in[i] - vmax);
    }
    red[tid] = sum;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s /= 2) {
        if (tid < s) {
            red[tid] += red[tid + s];
        }
        __syncthreads();
    }
    float total = red[0];

    // 3. write
    for (int i = tid; i < n; i += BLOCK) {
        out[i] = expf(in[i] - vmax) / total;
    }
}

void softmax_vector(const float* d_in, float* d_out, int n, cudaStream_t stream)
{
    softmax_vec_1blk<<<1, BLOCK, 0, stream>>>(d_in, d_out, n);
}
