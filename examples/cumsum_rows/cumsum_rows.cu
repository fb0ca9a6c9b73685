// Cumulative sum along each row, fp32, as a first version is often written (KernelBench's cumsum):
// one thread per row, a running sum stored after each element.
//   y[r, j] = x[r, 0] + x[r, 1] + ... + x[r, j]
//   x: [M, N] f32 (row-major), y: [M, N] f32; M, N: int.
// Naive: neighbouring threads read and write addresses N floats apart (no coalescing), cdiv(M, 128)
// blocks for the whole GPU (a few hundred threads when rows are long and few), and the sum is a running
// fp32 sum (ref.py, in float64, is the judge, not this kernel).
extern "C" __global__ void cumsum_rows(const float* x, float* y, int M, int N)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M) return;

    float acc = 0.0f;
    for (int j = 0; j < N; j++) {
        acc += x[(size_t)r * N + j];
        y[(size_t)r * N + j] = acc;
    }
}
