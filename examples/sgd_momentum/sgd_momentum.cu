// One step of SGD with momentum and weight decay (PyTorch's torch.optim.SGD, dampening 0, not
// Nesterov), fp32, as a first version is often written: one thread per element.
//   g = grad[i] + weight_decay * param[i]
//   mom[i] = momentum * mom[i] + g
//   param[i] = param[i] - lr * mom[i]
//   param, mom: [N] f32, updated in place; grad: [N] f32; N: int; lr, momentum, weight_decay: float.
// Naive: scalar 4-byte loads and stores, one element per thread, param read twice in the source.
extern "C" __global__ void sgd_momentum(float* param, const float* grad, float* mom, int N,
                                        float lr, float momentum, float weight_decay)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;

    float g = grad[i] + weight_decay * param[i];
    float m = momentum * mom[i] + g;
    mom[i] = m;
    param[i] = param[i] - lr * m;
}
