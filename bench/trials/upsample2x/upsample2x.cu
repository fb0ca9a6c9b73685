__global__ void upsample2x(const float* x, float* y, int N, int C, int H, int W) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int OH = 2 * H;
    int OW = 2 * W;
    int total = N * C * OH * OW;
    if (idx >= total) return;
    int ow = idx % OW;
    int oh = (idx / OW) % OH;
    int nc = idx / (OW * OH);
    y[idx] = x[(nc * H + oh / 2) * W + ow / 2];
}
