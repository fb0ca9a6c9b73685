__global__ void layernorm_bwd_dx(const float* dy, const float* x, const float* mean, const float* rstd,
                                 const float* gamma, float* dx, int M, int N) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M) return;
    float mu = mean[r];
    float rs = rstd[r];
    float sum1 = 0.0f;
    float sum2 = 0.0f;
    for (int j = 0; j < N; j++) {
        float g = dy[r * N + j] * gamma[j];
        float xhat = (x[r * N + j] - mu) * rs;
        sum1 += g;
        sum2 += g * xhat;
    }
    sum1 /= N;
    sum2 /= N;
    for (int j = 0; j < N; j++) {
        float g = dy[r * N + j] * gamma[j];
        float xhat = (x[r * N + j] - mu) * rs;
        dx[r * N + j] = (g - sum1 - xhat * sum2) * rs;
    }
}
