// Row-wise max and argmax, fp32, as a first version is often written: one thread per row, one loop.
//   vmax[r] = max_i x[r, i],   imax[r] = the first i with x[r, i] == vmax[r]   (first index on ties)
//   x: [M, N] f32 (row-major, no NaN), vmax: [M] f32, imax: [M] int32; M, N: int (N >= 1).
// Naive: neighbouring threads read addresses N floats apart (no coalescing), and only cdiv(M, 128)
// blocks for the whole GPU.
extern "C" __global__ void row_argmax(const float* x, float* vmax, int* imax, int M, int N)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M) return;

    const float* xr = x + (size_t)row * N;
    float best = xr[0];
    int arg = 0;
    for (int i = 1; i < N; ++i) {
        if (xr[i] > best) {  // strictly greater: the first of equal values is kept
            best = xr[i];
            arg = i;
        }
    }
    vmax[row] = best;
    imax[row] = arg;
}
