// GRU cell elementwise update (PyTorch gate order r, z, n).
// xg: input projections  [B, 3H]  (W_ih x + b_ih)
// hg: hidden projections [B, 3H]  (W_hh h + b_hh)
// h:  previous hidden    [B, H]
// hy: new hidden         [B, H]
extern "C" __global__ void gru_cell(const float* xg, const float* hg, const float* h,
                                    float* hy, int B, int H)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * H) return;
    int b = idx / H;
    int j = idx % H;
    const float* xrow = xg + (size_t)b * 3 * H;
    const float* hrow = hg + (size_t)b * 3 * H;
    float r = 1.0f / (1.0f + expf(-(xrow[j] + hrow[j])));
    float z = 1.0f / (1.0f + expf(-(xrow[H + j] + hrow[H + j])));
    float n = tanhf(xrow[2 * H + j] + r * hrow[2 * H + j]);
    hy[idx] = (1.0f - z) * n + z * h[idx];
}
