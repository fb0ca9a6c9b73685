// torch.flip(x, dims=[-1]) for x [rows, cols] f32: y[r, c] = x[r, cols - 1 - c]. One thread per element.
__global__ void flip_last(const float* x, float* y, int rows, int cols)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < rows * cols) {
        int r = idx / cols;
        int c = idx % cols;
        y[idx] = x[r * cols + (cols - 1 - c)];
    }
}

void launch_flip_last(const float* x, float* y, int rows, int cols)
{
    int n = rows * cols;
    flip_last<<<(n + 255) / 256, 256>>>(x, y, rows, cols);
}
