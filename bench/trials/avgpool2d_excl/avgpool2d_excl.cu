// AvgPool2d(kernel_size=3, stride=2, padding=1, count_include_pad=False), NCHW f32.
// One thread per output, flat index; the divisor counts only the taps inside the image.
__global__ void avgpool2d_excl(const float* x, float* y, int N, int C, int H, int W, int OH, int OW,
                               int ksize, int stride, int pad)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int total = N * C * OH * OW;
    if (idx < total) {
        int ow = idx % OW;
        int oh = (idx / OW) % OH;
        int nc = idx / (OW * OH);
        int h0 = oh * stride - pad;
        int w0 = ow * stride - pad;
        float sum = 0.0f;
        int count = 0;
        for (int i = 0; i < ksize; i++) {
            for (int j = 0; j < ksize; j++) {
                int ih = h0 + i;
                int iw = w0 + j;
                if (ih >= 0 && ih < H && iw >= 0 && iw < W) {
                    sum += x[(nc * H + ih) * W + iw];
                    count++;
                }
            }
        }
        y[idx] = sum / count;
    }
}

void launch_avgpool2d_excl(const float* x, float* y, int N, int C, int H, int W)
{
    int ksize = 3, stride = 2, pad = 1;
    int OH = (H + 2 * pad - ksize) / stride + 1;
    int OW = (W + 2 * pad - ksize) / stride + 1;
    int total = N * C * OH * OW;
    int block = 256;
    int grid = (total + block - 1) / block;
    avgpool2d_excl<<<grid, block>>>(x, y, N, C, H, W, OH, OW, ksize, stride, pad);
}
