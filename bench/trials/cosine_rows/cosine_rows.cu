// Row-wise cosine similarity: a, b [M, N] (f32, row-major) -> out [M],
// out[i] = dot(a_i, b_i) / (sqrt(|a_i|^2) * sqrt(|b_i|^2) + eps).
// One thread per row, one loop accumulating the three sums.
extern "C" __global__ void cosine_rows(const float* a, const float* b, float* out, int M, int N, float eps)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M) return;

    float dot = 0.0f, na = 0.0f, nb = 0.0f;
    for (int j = 0; j < N; j++) {
        float x = a[row * N + j];
        float y = b[row * N + j];
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    out[row] = dot / (sqrtf(na) * sqrtf(nb) + eps);
}
