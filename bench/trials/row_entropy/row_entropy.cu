// Shannon entropy (natural log) of each row of non-negative scores p [M, N] (bf16, row-major), normalised
// to a probability row first:  s = sum_j p[r, j],  q_j = p[r, j] / s,  ent[r] = -sum_j q_j * log(q_j)
// (terms with q_j <= 0 skipped: 0 * log 0 = 0; a row whose sum is 0 has entropy 0). ent: [M] f32.
// One thread per row: a loop for the sum, a second loop for the entropy.
#include <cuda_bf16.h>

extern "C" __global__ void row_entropy(const __nv_bfloat16* p, float* ent, int M, int N)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M) return;

    float s = 0.0f;
    for (int j = 0; j < N; j++) {
        float v = __bfloat162float(p[row * N + j]);
        if (v > 0.0f) s += v;
    }

    float h = 0.0f;
    if (s > 0.0f) {
        for (int j = 0; j < N; j++) {
            float q = __bfloat162float(p[row * N + j]) / s;
            if (q > 0.0f) h -= q * logf(q);
        }
    }
    ent[row] = h;
}

void launch_row_entropy(const __nv_bfloat16* p, float* ent, int M, int N)
{
    int threads = 128;
    int blocks = (M + threads - 1) / threads;
    row_entropy<<<blocks, threads>>>(p, ent, M, N);
}
