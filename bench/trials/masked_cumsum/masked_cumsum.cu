// Masked cumulative sum along rows: out[r, j] = sum_{k <= j, mask[r, k]} x[r, k]
// x, out: [rows, len] float32; mask: [rows, len] torch.bool (1 byte). One thread per row.
// Written first with `const bool* mask`: `ptxfactory optimise` refuses it (no bool dtype; u8 expects
// uint8_t or unsigned char), so the mask is passed as bytes: (const unsigned char*)mask.data_ptr<bool>().
__global__ void masked_cumsum(const float* x, const unsigned char* mask, float* out, int rows, int len)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    float running = 0.0f;
    for (int j = 0; j < len; j++) {
        if (mask[row * len + j]) {
            running += x[row * len + j];
        }
        out[row * len + j] = running;
    }
}

void launch_masked_cumsum(const float* x, const unsigned char* mask, float* out, int rows, int len)
{
    int threads = 128;
    int blocks = (rows + threads - 1) / threads;
    masked_cumsum<<<blocks, threads>>>(x, mask, out, rows, len);
}
