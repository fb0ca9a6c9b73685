// log_softmax over dim 1 of x [batch, dim] (torch.log_softmax(x, dim=1)), float32.
// One thread per row: a max loop, a sum-of-exp loop, then the write loop.
#include <cuda_runtime.h>
#include <math.h>

__global__ void logsoftmax_rows(const float* x, float* y, int batch, int dim)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < batch) {
        // find the max of the row
        float max_val = -INFINITY;
        for (int i = 0; i < dim; i++) {
            float v = x[row * dim + i];
            if (v > max_val) {
                max_val = v;
            }
        }
        // sum of exp(x - max)
        float sum = 0.0f;
        for (int i = 0; i < dim; i++) {
            sum += expf(x[row * dim + i] - max_val);
        }
        float log_sum = logf(sum);
        // write out
        for (int i = 0; i < dim; i++) {
            y[row * dim + i] = x[row * dim + i] - max_val - log_sum;
        }
    }
}

void launch_logsoftmax_rows(const float* x, float* y, int batch, int dim)
{
    int threads = 128;
    int blocks = (batch + threads - 1) / threads;
    logsoftmax_rows<<<blocks, threads>>>(x, y, batch, dim);
}
