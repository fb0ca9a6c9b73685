__global__ void conv2d(const float* x, const float* w, float* y, int Nb, int C, int H, int W,
                       int OC, int KH, int KW) {
    int OH = H - KH + 1;
    int OW = W - KW + 1;
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int total = Nb * OC * OH * OW;
    if (idx >= total) return;
    int ow = idx % OW;
    int oh = (idx / OW) % OH;
    int oc = (idx / (OW * OH)) % OC;
    int n = idx / (OW * OH * OC);
    float acc = 0.0f;
    for (int ic = 0; ic < C; ic++) {
        for (int kh = 0; kh < KH; kh++) {
            for (int kw = 0; kw < KW; kw++) {
                acc += x[((n * C + ic) * H + oh + kh) * W + ow + kw] * w[((oc * C + ic) * KH + kh) * KW + kw];
            }
        }
    }
    y[idx] = acc;
}
