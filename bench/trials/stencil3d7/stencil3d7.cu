// 7-point 3-D stencil on a [Z, Y, X] f32 grid (x fastest): at interior points
//   out = c0 * u[z][y][x] + c1 * (u[z][y][x-1] + u[z][y][x+1] + u[z][y-1][x] + u[z][y+1][x] + u[z-1][y][x] + u[z+1][y][x])
// and out = u on the boundary faces. One thread per flat point.
extern "C" __global__ void stencil3d7(const float* u, float* out, int Z, int Y, int X, float c0, float c1)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= Z * Y * X) return;
    int z = idx / (Y * X);
    int y = (idx / X) % Y;
    int x = idx % X;

    if (z == 0 || z == Z - 1 || y == 0 || y == Y - 1 || x == 0 || x == X - 1) {
        out[idx] = u[idx];
        return;
    }
    float nb = u[idx - 1] + u[idx + 1] + u[idx - X] + u[idx + X] + u[idx - X * Y] + u[idx + X * Y];
    out[idx] = c0 * u[idx] + c1 * nb;
}
