// C = A @ B in fp32, as a first version is often written: a 2-D launch, one thread per output
// element, 16 x 16 threads per block.
//   A: [M, K], B: [K, N], C: [M, N] f32, row-major; M, N, K: int (each buffer's size fits in an int).
// Naive: every thread reads a row of A and a column of B from global memory (each element of A is
// read N times, each of B M times, from L1/L2 at best), one multiply-add per two loads: far below
// the GPU's floating-point rate at large sizes, where the work is compute-bound.
extern "C" __global__ void matmul_naive(const float* A, const float* B, float* C, int M, int N, int K)
{
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; k++)
            acc += A[row * K + k] * B[k * N + col];
        C[row * N + col] = acc;
    }
}
