// CosineSimilarityLoss: mean over rows of (1 - cos(a_i, b_i)), a, b [N, D] float32 -> loss[0].
// One thread per row computes dot and both norms, then atomically adds (1 - cos) / N.
#define EPS 1e-8f

__global__ void cosine_loss(const float* a, const float* b, float* loss, int N, int D)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N) return;
    const float* pa = a + row * D;
    const float* pb = b + row * D;
    float dot = 0.0f;
    float na = 0.0f;
    float nb = 0.0f;
    for (int k = 0; k < D; k++) {
        dot += pa[k] * pb[k];
        na += pa[k] * pa[k];
        nb += pb[k] * pb[k];
    }
    float denom = fmaxf(sqrtf(na) * sqrtf(nb), EPS);
    float cos_sim = dot / denom;
    atomicAdd(loss, (1.0f - cos_sim) / N);
}

void launch_cosine_loss(const float* a, const float* b, float* loss, int N, int D)
{
    int threads = 256;
    int blocks = (N + threads - 1) / threads;
    cosine_loss<<<blocks, threads>>>(a, b, loss, N, D);
}
