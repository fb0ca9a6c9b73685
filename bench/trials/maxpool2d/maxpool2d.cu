__global__ void maxpool2d(const float* x, float* y, int N, int C, int H, int W, int K, int S) {
    int OH = (H - K) / S + 1;
    int OW = (W - K) / S + 1;
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int total = N * C * OH * OW;
    if (idx >= total) return;
    int ow = idx % OW;
    int oh = (idx / OW) % OH;
    int c = (idx / (OW * OH)) % C;
    int n = idx / (OW * OH * C);
    float mx = -INFINITY;
    for (int kh = 0; kh < K; kh++) {
        for (int kw = 0; kw < K; kw++) {
            int ih = oh * S + kh;
            int iw = ow * S + kw;
            float v = x[((n * C + c) * H + ih) * W + iw];
            if (v > mx) mx = v;
        }
    }
    y[idx] = mx;
}
