// Per-sample mean and max of a [B, N] tensor: B is small (2..8), N is long (millions).
// One block per sample (row), shared-memory tree reductions for both statistics at once.
#include <cuda_runtime.h>
#include <float.h>

#define THREADS 256

__global__ void row_mean_max(const float* __restrict__ x, float* __restrict__ mean_out,
                             float* __restrict__ max_out, int B, int N)
{
    __shared__ float s_sum[THREADS];
    __shared__ float s_max[THREADS];
    int row = blockIdx.x;
    if (row >= B) return;
    int tid = threadIdx.x;
    const float* xr = x + (size_t)row * N;

    float sum = 0.0f;
    float mx = -FLT_MAX;
    for (int j = tid; j < N; j += blockDim.x) {
        float v = xr[j];
        sum += v;
        mx = fmaxf(mx, v);
    }
    s_sum[tid] = sum;
    s_max[tid] = mx;
    __syncthreads();

    for (int off = blockDim.x >> 1; off > 0; off >>= 1) {
        if (tid < off) {
            s_sum[tid] += s_sum[tid + off];
            s_max[tid] = fmaxf(s_max[tid], s_max[tid + off]);
        }
        __syncthreads();
    }
    if (tid == 0) {
        mean_out[row] = s_sum[0] / N;
        max_out[row] = s_max[0];
    }
}

void batch_mean_max(const float* x, float* mean, float* mx, int batch, int len)
{
    dim3 grid(batch);
    dim3 block(THREADS);
    row_mean_max<<<grid, block>>>(x, mean, mx, batch, len);
}
