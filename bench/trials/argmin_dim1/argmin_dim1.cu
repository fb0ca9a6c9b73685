// argmin over dim 1 (KernelBench level 1, "Argmin over a dimension"): torch.argmin(x, dim=1)
// x: [B, D1, D2] float32, out: [B, D2] int64 (torch's index dtype).
// One thread per output (b, j), looping over D1; the first minimum wins on ties, as torch.
#include <cstdint>

__global__ void argmin_dim1(const float* x, int64_t* out, int B, int D1, int D2)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * D2) return;
    int b = idx / D2;
    int j = idx % D2;

    float min_val = x[b * D1 * D2 + j];
    int64_t min_idx = 0;
    for (int i = 1; i < D1; i++) {
        float v = x[b * D1 * D2 + i * D2 + j];
        if (v < min_val) {
            min_val = v;
            min_idx = i;
        }
    }
    out[idx] = min_idx;
}

void launch_argmin_dim1(const float* x, int64_t* out, int B, int D1, int D2, cudaStream_t stream)
{
    int total = B * D2;
    int block_size = 256;
    int num_blocks = (total + block_size - 1) / block_size;
    argmin_dim1<<<num_blocks, block_size, 0, stream>>>(x, out, B, D1, D2);
}
