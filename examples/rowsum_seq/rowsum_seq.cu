// Row sum, fp32, as a first version is often written: one thread per row, a plain loop.
//   s[r] = sum_i x[r, i]
//   x: [M, N] f32 (row-major), s: [M] f32; M, N: int.
// Naive twice over: neighbouring threads read addresses N floats apart (no coalescing, and only
// cdiv(M, 128) blocks for the whole GPU), and the running fp32 sum is the least accurate order
// there is: its rounding error grows faster than the row length (about 5e-6 of the sum at
// N = 10^6, against 1e-7 for a tree). So this kernel is a poor oracle: the spec judges every
// candidate, and this kernel too, against ref.py (float64), and a tree reduction that disagrees
// with this kernel is accepted as long as it is closer to the exact sum.
extern "C" __global__ void rowsum_seq(const float* x, float* s, int M, int N)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M) return;

    const float* p = x + (size_t)row * N;
    float sum = 0.0f;
    for (int i = 0; i < N; ++i) {
        sum += p[i];
    }
    s[row] = sum;
}
