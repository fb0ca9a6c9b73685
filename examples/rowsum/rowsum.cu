// Row-sum reduction, fp32, as a newcomer writes it.
//   s[r] = sum_i x[r, i]
//   x: [M, N] f32 (row-major), s: [M] f32; M, N: int.
// Naive: one block of 256 threads per row whatever N is (most threads idle on short rows, too few
// blocks in flight on long ones); scalar 4-byte loads; a shared-memory tree reduction with a
// __syncthreads per step, where warp shuffles would do the last 5 steps.
extern "C" __global__ void rowsum(const float* x, float* s, int M, int N)
{
    __shared__ float partial[256];
    int row = blockIdx.x;
    if (row >= M) return;

    float sum = 0.0f;
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        sum += x[(size_t)row * N + i];
    }
    partial[threadIdx.x] = sum;
    __syncthreads();

    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) {
            partial[threadIdx.x] += partial[threadIdx.x + stride];
        }
        __syncthreads();
    }

    if (threadIdx.x == 0) {
        s[row] = partial[0];
    }
}
