__global__ void conv1d_depthwise(const float* x, const float* w, float* y, int B, int C, int L, int K) {
    int OL = L - K + 1;
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int total = B * C * OL;
    if (idx >= total) return;
    int o = idx % OL;
    int c = (idx / OL) % C;
    int b = idx / (OL * C);
    float sum = 0.0f;
    for (int k = 0; k < K; k++) {
        sum += x[(b * C + c) * L + o + k] * w[c * K + k];
    }
    y[idx] = sum;
}
