// torch.prod(x, dim=1) for x [B, D1, D2], float32: out[b, j] = prod_i x[b, i, j].
// One thread per output (b, j), flat index taken apart with / and %.
#define BLOCK_SIZE 256

__global__ void prod_dim1(const float* input, float* output, int B, int D1, int D2)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int total = B * D2;
    if (idx >= total) return;
    int b = idx / D2;
    int j = idx % D2;
    float prod = 1.0f;
    for (int i = 0; i < D1; ++i) {
        prod *= input[(b * D1 + i) * D2 + j];
    }
    output[b * D2 + j] = prod;
}

void launch_prod_dim1(const float* input, float* output, int B, int D1, int D2)
{
    int total = B * D2;
    int grid = (total + BLOCK_SIZE - 1) / BLOCK_SIZE;
    prod_dim1<<<grid, BLOCK_SIZE>>>(input, output, B, D1, D2);
}
