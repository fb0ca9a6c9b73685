// KL divergence with reduction='batchmean' (KernelBench level 1, "KLDivLoss"):
//   torch.nn.functional.kl_div(log_pred, target, reduction='batchmean')
//   = sum over all elements of target * (log(target) - log_pred), divided by the batch size.
// log_pred, target: [batch, dim] float32; out: one float, zeroed by the caller (cudaMemset) before the launch.
// One thread per element, each adding its term (already divided by batch) to out with atomicAdd.
// A zero target contributes 0 (torch uses xlogy: 0 * log 0 = 0).
__global__ void kl_div_mean(const float* log_pred, const float* target, float* out, int batch, int dim)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < batch * dim) {
        float t = target[idx];
        float term = 0.0f;
        if (t > 0.0f) {
            term = t * (logf(t) - log_pred[idx]);
        }
        atomicAdd(out, term / batch);
    }
}

void launch_kl_div_mean(const float* log_pred, const float* target, float* out, int batch, int dim, cudaStream_t stream)
{
    int n = batch * dim;
    cudaMemsetAsync(out, 0, sizeof(float), stream);
    kl_div_mean<<<(n + 255) / 256, 256, 0, stream>>>(log_pred, target, out, batch, dim);
}
