// Softmax backward over the rows of y, dy [M, N] (f32, row-major): y is softmax's output, dy the gradient at
// it; dx [M, N] = y * (dy - sum_j dy_j * y_j), the sum taken per row.
// One thread per row: a loop for the dot product, then one writing dx.
extern "C" __global__ void softmax_bwd(const float* y, const float* dy, float* dx, int M, int N)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M) return;

    float dot = 0.0f;
    for (int j = 0; j < N; j++)
        dot += dy[row * N + j] * y[row * N + j];

    for (int j = 0; j < N; j++)
        dx[row * N + j] = y[row * N + j] * (dy[row * N + j] - dot);
}
