// Matrix-vector product (GEMV), fp32, as a newcomer writes it.
//   y[r] = sum_k A[r, k] * x[k]
//   A: [M, K] f32 (row-major), x: [K] f32, y: [M] f32; M, K: int.
// Naive: one thread per row, summing its K products in order. The 32 threads of a warp read 32
// different rows, K * 4 bytes apart, so no load is coalesced; only M threads exist (a few blocks
// when M is small, so most SMs sit idle); scalar 4-byte loads; x re-read by every thread.
extern "C" __global__ void gemv(const float* A, const float* x, float* y, int M, int K)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M) return;

    float acc = 0.0f;
    for (int k = 0; k < K; ++k) {
        acc += A[(size_t)row * K + k] * x[k];
    }
    y[row] = acc;
}
