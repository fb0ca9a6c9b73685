__global__ void spmv_ell(const float* val, const int* col, const float* x, float* y, int M, int K) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M) return;
    float sum = 0.0f;
    for (int k = 0; k < K; k++) {
        sum += val[r * K + k] * x[col[r * K + k]];
    }
    y[r] = sum;
}
