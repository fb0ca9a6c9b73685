// torch.nn.functional.smooth_l1_loss(pred, target, beta=1.0, reduction='mean') for [batch, dim] float32.
// One thread per element, each adds its term / n into loss[0] with atomicAdd (loss zeroed by the caller).
__global__ void huber_mean(const float* pred, const float* target, float* loss, int batch, int dim, float beta)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int n = batch * dim;
    if (i < n) {
        float diff = pred[i] - target[i];
        float ad = fabsf(diff);
        float l;
        if (ad < beta) {
            l = 0.5f * diff * diff / beta;
        } else {
            l = ad - 0.5f * beta;
        }
        atomicAdd(loss, l / (float)n);
    }
}

void launch_huber_mean(const float* pred, const float* target, float* loss, int batch, int dim, float beta)
{
    // cudaMemset(loss, 0, sizeof(float)) done by the caller
    int n = batch * dim;
    int threads = 256;
    int blocks = (n + threads - 1) / threads;
    huber_mean<<<blocks, threads>>>(pred, target, loss, batch, dim, beta);
}
