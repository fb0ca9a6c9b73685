// AvgPool3d(kernel_size=3, stride=2, padding=1), count_include_pad=True: always divide by 27.
// x [N, C, D, H, W] -> y [N, C, OD, OH, OW], O* = (* + 2*pad - k) / stride + 1. One thread per output.
#define KS 3
#define STRIDE 2
#define PAD 1

__global__ void avgpool3d(const float* x, float* y, int N, int C, int D, int H, int W,
                          int OD, int OH, int OW)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int total = N * C * OD * OH * OW;
    if (idx >= total) return;
    int ow = idx % OW;
    int oh = (idx / OW) % OH;
    int od = (idx / (OW * OH)) % OD;
    int c = (idx / (OW * OH * OD)) % C;
    int n = idx / (OW * OH * OD * C);
    float sum = 0.0f;
    for (int kd = 0; kd < KS; kd++) {
        int id = od * STRIDE - PAD + kd;
        if (id < 0 || id >= D) continue;
        for (int kh = 0; kh < KS; kh++) {
            int ih = oh * STRIDE - PAD + kh;
            if (ih < 0 || ih >= H) continue;
            for (int kw = 0; kw < KS; kw++) {
                int iw = ow * STRIDE - PAD + kw;
                if (iw < 0 || iw >= W) continue;
                sum += x[(((n * C + c) * D + id) * H + ih) * W + iw];
            }
        }
    }
    y[idx] = sum / (KS * KS * KS);
}

void launch_avgpool3d(const float* x, float* y, int N, int C, int D, int H, int W)
{
    int OD = (D + 2 * PAD - KS) / STRIDE + 1;
    int OH = (H + 2 * PAD - KS) / STRIDE + 1;
    int OW = (W + 2 * PAD - KS) / STRIDE + 1;
    int total = N * C * OD * OH * OW;
    int block = 256;
    int grid = (total + block - 1) / block;
    avgpool3d<<<grid, block>>>(x, y, N, C, D, H, W, OD, OH, OW);
}
