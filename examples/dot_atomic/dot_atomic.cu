// Dot product, fp32, as a first version is often written: one thread per element, one atomicAdd each.
//   out[0] += sum_i x[i] * y[i]      x, y: [N] f32; out: [1] f32, zeroed by the caller (spec: inout, zeros)
// Naive: every element's atomic goes to the same address, so the whole kernel waits on one memory
// location's atomic unit, however many SMs there are.
extern "C" __global__ void dot_atomic(const float* x, const float* y, float* out, int N)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) atomicAdd(out, x[i] * y[i]);
}
