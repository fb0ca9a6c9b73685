// out[b, j] = mean over i of x[b, i, j], x: [B, D1, D2]. One thread per (b, j) output.
__global__ void mean_dim1(const float* x, float* out, int B, int D1, int D2)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < B * D2) {
        int b = idx / D2;
        int j = idx % D2;
        float sum = 0.0f;
        for (int i = 0; i < D1; i++) {
            sum += x[b * D1 * D2 + i * D2 + j];
        }
        out[idx] = sum / (float)D1;
    }
}

void launch_mean(const float* x, float* out, int B, int D1, int D2)
{
    int threads = 256;
    int blocks = (B * D2 + threads - 1) / threads;
    mean_dim1<<<blocks, threads>>>(x, out, B, D1, D2);
}
