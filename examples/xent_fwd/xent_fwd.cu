// Cross-entropy forward (softmax + negative log-likelihood), fp32, as a first version is often
// written: one thread per row, a loop for the max, a loop for the sum of exponentials, one store.
//   loss[r] = log(sum_j exp(logits[r, j])) - logits[r, target[r]]
//           = mx + log(sum_j exp(logits[r, j] - mx)) - logits[r, target[r]],  mx = max_j logits[r, j]
//   logits: [M, V] f32 (row-major), target: [M] int32 class ids in [0, V), loss: [M] f32; M, V: int.
// Naive: neighbouring threads read addresses V floats apart (no coalescing; cdiv(M, 128) blocks for
// the whole GPU), the logits are read twice, and the sum of exponentials is a running fp32 sum.
extern "C" __global__ void xent_fwd(const float* logits, const int* target, float* loss, int M, int V)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M) return;

    const float* z = logits + (size_t)row * V;
    float mx = z[0];
    for (int j = 1; j < V; ++j) {
        mx = fmaxf(mx, z[j]);
    }
    float sum = 0.0f;
    for (int j = 0; j < V; ++j) {
        sum += expf(z[j] - mx);
    }
    loss[row] = mx + logf(sum) - z[target[row]];
}
