__global__ void bmm(const float* A, const float* B, float* C, int Bt, int M, int N, int K) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int total = Bt * M * N;
    if (idx >= total) return;
    int b = idx / (M * N);
    int i = (idx / N) % M;
    int j = idx % N;
    float acc = 0.0f;
    for (int k = 0; k < K; k++) {
        acc += A[b * M * K + i * K + k] * B[b * K * N + k * N + j];
    }
    C[idx] = acc;
}
