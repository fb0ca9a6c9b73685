// k-means assignment step: x [N, D] points, c [K, D] centroids (f32, row-major) -> for each point the index of the
// nearest centroid by squared Euclidean distance (ties: the lowest index), assign [N], and that squared distance,
// dist [N]. One thread per point, looping over the centroids and, for each, over the coordinates.
extern "C" __global__ void kmeans_assign(const float* x, const float* c, int* assign, float* dist, int N, int K, int D)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;

    int best = 0;
    float best_d = 3.402823466e+38f;  // FLT_MAX
    for (int k = 0; k < K; k++) {
        float d = 0.0f;
        for (int j = 0; j < D; j++) {
            float diff = x[i * D + j] - c[k * D + j];
            d += diff * diff;
        }
        if (d < best_d) {
            best_d = d;
            best = k;
        }
    }
    assign[i] = best;
    dist[i] = best_d;
}
