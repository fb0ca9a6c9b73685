// EmbeddingBag forward, sum mode: table [V, D] (f32, row-major), idx [T] row indices into the table, offsets [B + 1]:
// bag b is idx[offsets[b]] .. idx[offsets[b + 1] - 1]; out [B, D] = for each bag the sum of its rows (0 for an
// empty bag). One thread per output element (bag, d), looping over the bag's indices.
extern "C" __global__ void embedding_bag(const float* table, const int* idx, const int* offsets, float* out,
                                         int B, int D, int T)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= B * D) return;
    int b = t / D;
    int d = t % D;

    float s = 0.0f;
    for (int j = offsets[b]; j < offsets[b + 1]; j++)
        s += table[idx[j] * D + d];
    out[b * D + d] = s;
}
