// Pairwise squared Euclidean distances: a [M, D], b [N, D] (f32, row-major) -> out [M, N],
// out[i, j] = sum_d (a[i, d] - b[j, d])^2. One thread per output, a 2-D launch of 16x16 blocks
// (x over j, y over i), the loop over d inside.
extern "C" __global__ void cdist(const float* a, const float* b, float* out, int M, int N, int D)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= M || j >= N) return;

    float acc = 0.0f;
    for (int d = 0; d < D; d++) {
        float diff = a[i * D + d] - b[j * D + d];
        acc += diff * diff;
    }
    out[i * N + j] = acc;
}
