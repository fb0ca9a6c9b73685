// Embedding lookup (gather), bf16, as a newcomer writes it.
//   out[t, :] = table[idx[t], :]
//   table: [V, D] bf16 (row-major), idx: [T] int32 token ids in [0, V), out: [T, D] bf16; T, D: int.
// Naive: one thread per token copies its whole row, one 2-byte element at a time, so the threads of
// a warp read 32 different rows in lock step (every load a separate memory transaction).
#include <cuda_bf16.h>

extern "C" __global__ void embedding(const __nv_bfloat16* table, const int* idx, __nv_bfloat16* out, int T, int D)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;

    const __nv_bfloat16* row = table + (size_t)idx[t] * D;
    for (int d = 0; d < D; ++d)
        out[(size_t)t * D + d] = row[d];
}
