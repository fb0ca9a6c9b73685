// Global max |x| of a tensor (the per-tensor scale of an FP8/int8 quantiser), into one float that the
// caller zeroes first. |x| >= 0, so its bits order as a signed int: atomicMax on the int view.
__global__ void absmax_atomic(const float* x, float* amax, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = fabsf(x[i]);
        atomicMax((int*)amax, __float_as_int(v));
    }
}

void launch_absmax(const float* x, float* amax, int n)
{
    int threads = 256;
    int blocks = (n + threads - 1) / threads;
    absmax_atomic<<<blocks, threads>>>(x, amax, n);
}
