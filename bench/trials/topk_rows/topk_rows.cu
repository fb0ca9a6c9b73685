// Top-k (k = 8) of each row of x [M, N] (f32): the 8 largest values in descending order and their column indices
// (ties: the lowest index first), by repeated max over the row, skipping the columns already chosen.
// One thread per row.
#include <math.h>
#define TOPK 8

__global__ void topk_rows(const float* x, float* vals, int* idx, int M, int N)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M) return;
    const float* row = x + (size_t)r * N;
    int chosen[TOPK];
    for (int k = 0; k < TOPK; k++) {
        float best = -INFINITY;
        int bi = -1;
        for (int j = 0; j < N; j++) {
            bool taken = false;
            for (int p = 0; p < k; p++) {
                if (chosen[p] == j) taken = true;
            }
            float v = row[j];
            if (!taken && v > best) {
                best = v;
                bi = j;
            }
        }
        chosen[k] = bi;
        vals[r * TOPK + k] = best;
        idx[r * TOPK + k] = bi;
    }
}

void launch_topk_rows(const float* d_x, float* d_vals, int* d_idx, int M, int N)
{
    int threads = 128;
    int blocks = (M + threads - 1) / threads;
    topk_rows<<<blocks, threads>>>(d_x, d_vals, d_idx, M, N);
}
