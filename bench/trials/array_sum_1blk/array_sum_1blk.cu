// Whole-array sum of x [n] (f32) into out[0], computed by ONE block of 256 threads: each thread sums a strided
// slice serially, then a shared-memory tree reduces the 256 partial sums.
#define THREADS 256

__global__ void array_sum_1blk(const float* x, float* out, int n)
{
    __shared__ float sdata[THREADS];
    int tid = threadIdx.x;
    float acc = 0.0f;
    for (int i = tid; i < n; i += blockDim.x) {
        acc += x[i];
    }
    sdata[tid] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) sdata[tid] += sdata[tid + s];
        __syncthreads();
    }
    if (tid == 0) out[0] = sdata[0];
}

void launch_array_sum(const float* d_x, float* d_out, int n)
{
    array_sum_1blk<<<1, THREADS>>>(d_x, d_out, n);
}
