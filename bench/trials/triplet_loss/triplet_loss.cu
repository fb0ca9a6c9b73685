// TripletMarginLoss(margin, p=2, eps=1e-6, reduction='mean'): torch's pairwise_distance adds eps to the difference.
// anchor, positive, negative [B, D]; loss [1] += max(||a-p+eps|| - ||a-n+eps|| + margin, 0) / B.
// One thread per row, serial loops through row pointers, one atomicAdd per row.
__global__ void triplet_loss(const float* anchor, const float* positive, const float* negative,
                             float* loss, int B, int D, float margin)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= B) return;
    const float* a = anchor + r * D;
    const float* p = positive + r * D;
    const float* n = negative + r * D;
    float dap = 0.0f, dan = 0.0f;
    for (int i = 0; i < D; i++) {
        float t1 = a[i] - p[i] + 1e-6f;
        float t2 = a[i] - n[i] + 1e-6f;
        dap += t1 * t1;
        dan += t2 * t2;
    }
    float l = sqrtf(dap) - sqrtf(dan) + margin;
    if (l < 0.0f) l = 0.0f;
    atomicAdd(loss, l / B);
}

void launch_triplet_loss(const float* a, const float* p, const float* n, float* loss, int B, int D)
{
    // loss must be zeroed by the caller (cudaMemset)
    triplet_loss<<<(B + 127) / 128, 128>>>(a, p, n, loss, B, D, 1.0f);
}
