// One Jacobi step of the 2-D Poisson equation (a five-point stencil), fp32, as a first version is
// often written: a 2-D launch, one thread per grid point, 16 x 16 threads per block.
//   interior (0 < i < H-1, 0 < j < W-1):
//     u_new[i, j] = 0.25 * (u[i-1, j] + u[i+1, j] + u[i, j-1] + u[i, j+1] - rhs[i, j])
//   boundary (first and last row and column): u_new[i, j] = u[i, j]   (Dirichlet values, copied)
//   u, rhs, u_new: [H, W] f32 (row-major; rhs is h^2 f); H, W: int (H * W fits in an int).
// Naive: every point loads its four neighbours from global memory (each value is read five times,
// from L1/L2 at best), 16-wide rows (half a warp per row), scalar loads.
extern "C" __global__ void stencil5(const float* u, const float* rhs, float* u_new, int H, int W)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;  // column
    int i = blockIdx.y * blockDim.y + threadIdx.y;  // row
    if (i >= H || j >= W) return;

    if (i == 0 || j == 0 || i == H - 1 || j == W - 1) {
        u_new[i * W + j] = u[i * W + j];
        return;
    }
    u_new[i * W + j] = 0.25f * (u[(i - 1) * W + j] + u[(i + 1) * W + j] + u[i * W + j - 1] + u[i * W + j + 1]
                                - rhs[i * W + j]);
}
