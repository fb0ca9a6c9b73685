// Matrix transpose, fp32, as a newcomer writes it.
//   y[j, i] = x[i, j]
//   x: [M, N] f32 (row-major), y: [N, M] f32 (row-major); M, N: int.
// Naive: one thread per element on a 2-D grid of 32 x 8 blocks (x over the columns of x, y over
// its rows); the reads are coalesced but the writes are not: the 32 threads of a warp store to 32
// different rows of y, M * 4 bytes apart, so every 4-byte store costs a whole 32-byte sector.
// No shared-memory tile. gridDim.y = cdiv(M, 8) stays under the 65535 limit up to M = 524280.
extern "C" __global__ void transpose(const float* x, float* y, int M, int N)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;  // column of x = row of y
    int row = blockIdx.y * blockDim.y + threadIdx.y;  // row of x = column of y
    if (row < M && col < N) {
        y[(size_t)col * M + row] = x[(size_t)row * N + col];
    }
}
