// sum of x[i] * w[i], the classic first reduction: one element per thread into shared memory, a tree, one atomic
// per block (65536 atomics at 2^24 elements).
extern "C" __global__ void block_sum(const float* x, const float* w, float* out, int n)
{
    __shared__ float cache[256];
    int tid = threadIdx.x;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    cache[tid] = (i < n) ? x[i] * w[i] : 0.0f;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) cache[tid] += cache[tid + s];
        __syncthreads();
    }
    if (tid == 0) atomicAdd(out, cache[0]);
}
