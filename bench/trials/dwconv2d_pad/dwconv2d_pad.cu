// Depthwise Conv2d, NCHW, 3x3 kernel, stride 1, padding 1, bias; one thread per output, flat index.
// Written by the engineer as the session's generality check (2026-12-05): a class no trial covered (2-D depthwise).
__global__ void dwconv2d_pad(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ bias,
                             float* __restrict__ y, int N, int C, int H, int W, int K, int pad)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int total = N * C * H * W;
    if (idx >= total) return;
    int ow = idx % W;
    int oh = (idx / W) % H;
    int c = (idx / (W * H)) % C;
    int n = idx / (W * H * C);
    float acc = bias[c];
    for (int kh = 0; kh < K; kh++) {
        for (int kw = 0; kw < K; kw++) {
            int ih = oh - pad + kh;
            int iw = ow - pad + kw;
            if (ih >= 0 && ih < H && iw >= 0 && iw < W)
                acc += x[((n * C + c) * H + ih) * W + iw] * w[(c * K + kh) * K + kw];
        }
    }
    y[idx] = acc;
}

void launch_dwconv2d(const float* x, const float* w, const float* b, float* y, int N, int C, int H, int W)
{
    int K = 3, pad = 1;
    int total = N * C * H * W;
    dwconv2d_pad<<<(total + 255) / 256, 256>>>(x, w, b, y, N, C, H, W, K, pad);
}
