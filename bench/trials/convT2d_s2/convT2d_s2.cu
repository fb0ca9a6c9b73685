// ConvTranspose2d, NCHW, stride and padding as arguments, weight [Cin, Cout, K, K] (torch's layout), no bias.
// y[n, oc, oh, ow] = sum_{ic, kh, kw} x[n, ic, ih, iw] * w[ic, oc, kh, kw] where oh = ih*stride - pad + kh.
// One thread per output: gather form, the `(oh + pad - kh) % stride` test picks the taps that land here.
__global__ void conv_transpose2d(const float* x, const float* w, float* y,
                                 int N, int Cin, int Cout, int H, int W, int OH, int OW,
                                 int K, int stride, int pad)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int total = N * Cout * OH * OW;
    if (idx >= total) return;
    int ow = idx % OW;
    int oh = (idx / OW) % OH;
    int oc = (idx / (OW * OH)) % Cout;
    int n = idx / (OW * OH * Cout);
    float sum = 0.0f;
    for (int ic = 0; ic < Cin; ic++) {
        for (int kh = 0; kh < K; kh++) {
            int th = oh + pad - kh;
            if (th < 0 || th % stride != 0) continue;
            int ih = th / stride;
            if (ih >= H) continue;
            for (int kw = 0; kw < K; kw++) {
                int tw = ow + pad - kw;
                if (tw < 0 || tw % stride != 0) continue;
                int iw = tw / stride;
                if (iw >= W) continue;
                sum += x[((n * Cin + ic) * H + ih) * W + iw] * w[((ic * Cout + oc) * K + kh) * K + kw];
            }
        }
    }
    y[idx] = sum;
}

void launch_conv_transpose2d(const float* x, const float* w, float* y,
                             int N, int Cin, int Cout, int H, int W)
{
    int K = 3, stride = 2, pad = 1;
    int OH = (H - 1) * stride - 2 * pad + K;
    int OW = (W - 1) * stride - 2 * pad + K;
    int total = N * Cout * OH * OW;
    int threads = 256;
    int blocks = (total + threads - 1) / threads;
    conv_transpose2d<<<blocks, threads>>>(x, w, y, N, Cin, Cout, H, W, OH, OW, K, stride, pad);
}
