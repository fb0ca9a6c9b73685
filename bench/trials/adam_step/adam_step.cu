// One Adam optimiser step over n parameters (f32): the moments m and v are updated in place, then p.
// bc1 = 1 - beta1^t and bc2 = 1 - beta2^t are the bias corrections, computed by the caller.
// One thread per parameter.
extern "C" __global__ void adam_step(float* p, const float* g, float* m, float* v, int n,
                                     float lr, float beta1, float beta2, float eps, float bc1, float bc2)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;

    float gi = g[i];
    float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float m_hat = mi / bc1;
    float v_hat = vi / bc2;
    p[i] -= lr * m_hat / (sqrtf(v_hat) + eps);
}
