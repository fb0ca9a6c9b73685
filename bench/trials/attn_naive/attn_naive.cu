// Naive attention forward, head dim 64. q, k, v, out: [B, H, T, D] float32.
// One thread per (b, h, query i).
#define D 64

__global__ void attn_naive(const float* q, const float* k, const float* v, float* out,
                           int B, int H, int T) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * H * T) return;
    int i = idx % T;
    int bh = idx / T;
    const float* Q = q + ((size_t)bh * T + i) * D;
    const float* K = k + (size_t)bh * T * D;
    const float* V = v + (size_t)bh * T * D;
    float scale = 1.0f / sqrtf((float)D);

    float qr[D];
    for (int d = 0; d < D; d++) qr[d] = Q[d];

    // pass 1: max score
    float m = -INFINITY;
    for (int j = 0; j < T; j++) {
        float s = 0.0f;
        for (int d = 0; d < D; d++) s += qr[d] * K[j * D + d];
        s *= scale;
        m = fmaxf(m, s);
    }
    // pass 2: exp-sum and weighted sum of v
    float acc[D];
    for (int d = 0; d < D; d++) acc[d] = 0.0f;
    float l = 0.0f;
    for (int j = 0; j < T; j++) {
        float s = 0.0f;
        for (int d = 0; d < D; d++) s += qr[d] * K[j * D + d];
        s *= scale;
        float p = expf(s - m);
        l += p;
        for (int d = 0; d < D; d++) acc[d] += p * V[j * D + d];
    }
    float* O = out + ((size_t)bh * T + i) * D;
    for (int d = 0; d < D; d++) O[d] = acc[d] / l;
}

void launch(const float* q, const float* k, const float* v, float* out, int B, int H, int T) {
    int n = B * H * T;
    int threads = 128;
    int blocks = (n + threads - 1) / threads;
    attn_naive<<<blocks, threads>>>(q, k, v, out, B, H, T);
}
