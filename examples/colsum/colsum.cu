// Column sums, fp32, as a first version is often written: one thread per column, one loop down the rows.
//   out[c] = sum_r x[r, c]
//   x: [M, N] f32 (row-major), out: [N] f32; M, N: int.
// Naive: neighbouring threads read neighbouring columns (coalesced), but each thread walks all M rows
// alone: with few columns only cdiv(N, 128) blocks (a few threads) run for the whole GPU, and with many
// each thread still sums a whole column in sequence.
extern "C" __global__ void colsum(const float* x, float* out, int M, int N)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= N) return;

    float s = 0.0f;
    for (int r = 0; r < M; ++r)
        s += x[(size_t)r * N + col];
    out[col] = s;
}
