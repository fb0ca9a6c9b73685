// MaxPool1d(kernel_size, stride, padding, dilation) over x [N, C, L] -> y [N, C, OL],
// OL = (L + 2*pad - dilation*(ksize-1) - 1) / stride + 1. Padding is -inf (never the max). One thread per output.
__global__ void maxpool1d_dil(const float* x, float* y, int N, int C, int L, int OL,
                              int ksize, int stride, int pad, int dilation)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= N * C * OL) return;
    int o = idx % OL;
    int nc = idx / OL;
    int start = o * stride - pad;
    float m = -INFINITY;
    for (int k = 0; k < ksize; k++) {
        int pos = start + k * dilation;
        float v;
        if (pos >= 0 && pos < L) {
            v = x[nc * L + pos];
        } else {
            v = -INFINITY;
        }
        if (v > m) {
            m = v;
        }
    }
    y[idx] = m;
}

void launch_maxpool1d(const float* x, float* y, int N, int C, int L)
{
    int ksize = 4, stride = 2, pad = 2, dilation = 3;
    int OL = (L + 2 * pad - dilation * (ksize - 1) - 1) / stride + 1;
    int total = N * C * OL;
    maxpool1d_dil<<<(total + 255) / 256, 256>>>(x, y, N, C, L, OL, ksize, stride, pad, dilation);
}
