#include <cstdint>

// Per-row cross-entropy: loss[r] = logsumexp(logits[r, :]) - logits[r, labels[r]]
// One thread per row.
__global__ void cross_entropy(const float* logits, const int64_t* labels, float* loss, int M, int V)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M) return;
    const float* x = logits + (size_t)row * V;

    float mx = -INFINITY;
    for (int j = 0; j < V; j++) {
        mx = fmaxf(mx, x[j]);
    }
    float sum = 0.0f;
    for (int j = 0; j < V; j++) {
        sum += expf(x[j] - mx);
    }
    int64_t lab = labels[row];
    loss[row] = logf(sum) + mx - x[lab];
}

void launch_cross_entropy(const float* logits, const int64_t* labels, float* loss, int M, int V)
{
    int threads = 256;
    int blocks = (M + threads - 1) / threads;
    cross_entropy<<<blocks, threads>>>(logits, labels, loss, M, V);
}
