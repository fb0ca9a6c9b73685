// Histogram of values in [0, 1), as a first version is often written: one thread per element, one global
// atomicAdd each.   b = (int)(x[i] * B), clamped to [0, B - 1];  hist[b] += 1
//   x: [N] f32; hist: [B] int32, zeroed by the caller (spec: inout, zeros); N, B: int
// Naive: every element's atomic goes to global memory, and all elements of a bin contend for its address.
extern "C" __global__ void histogram(const float* x, int* hist, int N, int B)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        int b = (int)(x[i] * (float)B);
        b = b < 0 ? 0 : (b >= B ? B - 1 : b);
        atomicAdd(&hist[b], 1);
    }
}
