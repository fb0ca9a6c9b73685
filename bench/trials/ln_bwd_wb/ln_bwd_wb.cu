// LayerNorm backward: gradients of the affine parameters.
// dgamma[j] = sum_i dy[i, j] * (x[i, j] - mean[i]) * rstd[i];  dbeta[j] = sum_i dy[i, j]
// One thread per column j, a loop over the batch rows.
__global__ void layernorm_bwd_gamma_beta(const float* dy, const float* x, const float* mean,
                                         const float* rstd, float* dgamma, float* dbeta,
                                         int rows, int cols)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= cols) return;
    float dg = 0.0f;
    float db = 0.0f;
    for (int i = 0; i < rows; i++) {
        float g = dy[i * cols + j];
        float xhat = (x[i * cols + j] - mean[i]) * rstd[i];
        dg += g * xhat;
        db += g;
    }
    dgamma[j] = dg;
    dbeta[j] = db;
}

void launch_layernorm_bwd_gamma_beta(const float* dy, const float* x, const float* mean, const float* rstd,
                                     float* dgamma, float* dbeta, int rows, int cols)
{
    int threads = 256;
    int blocks = (cols + threads - 1) / threads;
    layernorm_bwd_gamma_beta<<<blocks, threads>>>(dy, x, mean, rstd, dgamma, dbeta, rows, cols);
}
