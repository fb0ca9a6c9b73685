// Scatter-add of rows (torch's index_add_ along dimension 0): out [V, D] += src [T, D] row by row, row t of src
// added into row idx[t] of out (f32, row-major; idx [T] in [0, V)). Rows of src with the same index collide.
// One thread per element of src, a flat index taken apart into (t, d), one atomicAdd each.
extern "C" __global__ void scatter_add(float* out, const float* src, const int* idx, int T, int D, int V)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= T * D) return;

    int t = i / D;
    int d = i % D;
    atomicAdd(&out[idx[t] * D + d], src[t * D + d]);
}
