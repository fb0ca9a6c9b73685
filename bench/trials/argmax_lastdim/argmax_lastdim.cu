// torch.argmax(x, dim=-1) for x [B, D1, D2] float32 -> out [B, D1] int64.
// One thread per (b, i) row of length D2, a local pointer to the row.
#include <cstdint>

__global__ void argmax_lastdim(const float* x, int64_t* out, int B, int D1, int D2)
{
    int tid = blockIdx.x * blockDim.x + threadIdx.x;
    if (tid < B * D1) {
        const float* row = x + (long long)tid * D2;
        float best = row[0];
        int64_t best_idx = 0;
        for (int k = 1; k < D2; k++) {
            float v = row[k];
            if (v > best) {
                best = v;
                best_idx = k;
            }
        }
        out[tid] = best_idx;
    }
}

void launch_argmax_lastdim(const float* x, int64_t* out, int B, int D1, int D2)
{
    int threads = 256;
    int blocks = (B * D1 + threads - 1) / threads;
    argmax_lastdim<<<blocks, threads>>>(x, out, B, D1, D2);
}
