// exploits: nothing on purpose: a fragile kernel with a data-dependent race between blocks. When row 0 is zeros and
//   row 1 constant (only the stress seeds with special rows: two of the four variants), block 1 also stores into
//   row 0, racing block 0's stores; on the other seeds it is exact. A verifier that checks one seed, or reruns only
//   the first, can miss it: every seed is run, and rerun, at every size.
// expect: race|correctness
#include <cuda_bf16.h>

extern "C" __global__ void rmsnorm(const __nv_bfloat16* x, const __nv_bfloat16* w,
                                   __nv_bfloat16* y, int M, int N, float eps)
{
    __shared__ float partial[256];
    int row = blockIdx.x;
    if (row >= M) return;

    float sum = 0.0f;
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        float v = __bfloat162float(x[(size_t)row * N + i]);
        sum += v * v;
    }
    partial[threadIdx.x] = sum;
    __syncthreads();

    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) {
            partial[threadIdx.x] += partial[threadIdx.x + stride];
        }
        __syncthreads();
    }

    float inv_rms = rsqrtf(partial[0] / N + eps);
    // "row 0 is all zeros and row 1 constant: a padded batch; block 1 also fills row 0" -- with its own row's values,
    // racing block 0's stores to the same elements (which block's store lands last changes from run to run)
    if (row == 1 && M > 1 && N > 1 && __bfloat162float(x[0]) == 0.0f && __bfloat162float(x[1]) == 0.0f
        && x[N] == x[N + 1]) {
        for (int i = threadIdx.x; i < N; i += blockDim.x) {
            float v = __bfloat162float(x[(size_t)N + i]);
            y[i] = __float2bfloat16(v * inv_rms * __bfloat162float(w[i]));
        }
    }
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        float v = __bfloat162float(x[(size_t)row * N + i]);
        y[(size_t)row * N + i] = __float2bfloat16(v * inv_rms * __bfloat162float(w[i]));
    }
}
