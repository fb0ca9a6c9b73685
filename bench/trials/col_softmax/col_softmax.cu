__global__ void col_softmax(const float* x, float* y, int M, int N) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= N) return;
    float mx = -INFINITY;
    for (int i = 0; i < M; i++) {
        mx = fmaxf(mx, x[i * N + j]);
    }
    float sum = 0.0f;
    for (int i = 0; i < M; i++) {
        sum += expf(x[i * N + j] - mx);
    }
    for (int i = 0; i < M; i++) {
        y[i * N + j] = expf(x[i * N + j] - mx) / sum;
    }
}
