// y = x / ||x||_2 along dim 1 of x [B, D]. One thread per row.
__global__ void l2norm_dim1(const float* x, float* y, int batch_size, int dim)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= batch_size) return;
    float sumsq = 0.0f;
    for (int j = 0; j < dim; j++) {
        float v = x[row * dim + j];
        sumsq += v * v;
    }
    float norm = sqrtf(sumsq);
    for (int j = 0; j < dim; j++) {
        y[row * dim + j] = x[row * dim + j] / norm;
    }
}

void launch_l2norm(const float* x, float* y, int batch_size, int dim)
{
    l2norm_dim1<<<(batch_size + 127) / 128, 128>>>(x, y, batch_size, dim);
}
