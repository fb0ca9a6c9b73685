__global__ void groupnorm_fwd(const float* x, const float* gamma, const float* beta, float* y,
                              int N, int C, int HW, int G, float eps) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= N * G) return;
    int n = t / G;
    int g = t % G;
    int cpg = C / G;
    int count = cpg * HW;
    int base = (n * C + g * cpg) * HW;
    float sum = 0.0f;
    for (int i = 0; i < count; i++) {
        sum += x[base + i];
    }
    float mean = sum / count;
    float var = 0.0f;
    for (int i = 0; i < count; i++) {
        float d = x[base + i] - mean;
        var += d * d;
    }
    var = var / count;
    float rstd = 1.0f / sqrtf(var + eps);
    for (int i = 0; i < count; i++) {
        int c = g * cpg + i / HW;
        y[base + i] = (x[base + i] - mean) * rstd * gamma[c] + beta[c];
    }
}
