// Naive conv2d forward, NCHW, 3x3 kernel, pad=1, stride=2, with bias.
// One thread per flat output (n, oc, oh, ow).
#define KS 3
#define PAD 1
#define STRIDE 2

__global__ void conv2d_fwd(const float* __restrict__ x, const float* __restrict__ w,
                           const float* __restrict__ bias, float* __restrict__ y,
                           int N, int C, int H, int W, int OC, int OH, int OW)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int total = N * OC * OH * OW;
    if (idx >= total) return;
    int ow = idx % OW;
    int oh = (idx / OW) % OH;
    int oc = (idx / (OW * OH)) % OC;
    int n  = idx / (OW * OH * OC);

    float acc = bias[oc];
    for (int c = 0; c < C; ++c) {
        for (int kh = 0; kh < KS; ++kh) {
            int ih = oh * STRIDE - PAD + kh;
            if (ih < 0 || ih >= H) continue;
            for (int kw = 0; kw < KS; ++kw) {
                int iw = ow * STRIDE - PAD + kw;
                if (iw < 0 || iw >= W) continue;
                acc += x[((n * C + c) * H + ih) * W + iw] * w[((oc * C + c) * KS + kh) * KS + kw];
            }
        }
    }
    y[idx] = acc;
}

void launch_conv2d(const float* x, const float* w, const float* b, float* y,
                   int N, int C, int H, int W, int OC)
{
    int OH = (H + 2 * PAD - KS) / STRIDE + 1;
    int OW = (W + 2 * PAD - KS) / STRIDE + 1;
    int total = N * OC * OH * OW;
    int threads = 256;
    int blocks = (total + threads - 1) / threads;
    conv2d_fwd<<<blocks, threads>>>(x, w, b, y, N, C, H, W, OC, OH, OW);
}
