// RMSNorm backward, the input gradient only: y = x * rstd * w over the rows of x [M, N] (f32, row-major), rstd [M]
// saved by the forward pass (1 / sqrt(mean(x^2) + eps)), w [N] the weight, dy [M, N] the gradient at y:
// dx = rstd * (w * dy - x * rstd^2 * mean_j(w_j * dy_j * x_j)).
// One thread per row: a loop for the dot product, then one writing dx (x, dy and w read twice).
extern "C" __global__ void rmsnorm_bwd(const float* x, const float* dy, const float* w, const float* rstd, float* dx,
                                      int M, int N)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M) return;

    float r = rstd[row];
    float dot = 0.0f;
    for (int j = 0; j < N; j++)
        dot += w[j] * dy[row * N + j] * x[row * N + j];

    float c = r * r * dot / N;
    for (int j = 0; j < N; j++)
        dx[row * N + j] = r * (w[j] * dy[row * N + j] - x[row * N + j] * c);
}
