// out[b, n] = sum_d x[b, d, n], x: [B, D, N]. One thread per output element.
__global__ void sum_dim1(const float* x, float* out, int B, int D, int N)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * N) return;
    int b = idx / N;
    int n = idx % N;

    const float* p = x + (size_t)b * D * N + n;   // x[b, 0, n]
    float acc = 0.0f;
    for (int d = 0; d < D; d++) {
        acc += *p;
        p += N;
    }
    out[idx] = acc;
}
