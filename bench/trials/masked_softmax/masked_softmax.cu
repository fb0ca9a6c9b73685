__global__ void masked_softmax(const float* S, float* P, int R, int T) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= R) return;
    int i = r % T;
    float mx = -INFINITY;
    for (int j = 0; j <= i; j++) {
        mx = fmaxf(mx, S[r * T + j]);
    }
    float sum = 0.0f;
    for (int j = 0; j <= i; j++) {
        sum += expf(S[r * T + j] - mx);
    }
    for (int j = 0; j < T; j++) {
        P[r * T + j] = (j <= i) ? expf(S[r * T + j] - mx) / sum : 0.0f;
    }
}
