// Mean pooling over the token axis: x [B, T, C] (f32, row-major) -> y [B, C], y[b, c] = (1/T) * sum_t x[b, t, c].
// One thread per flat output index b * C + c, looping over the T tokens.
extern "C" __global__ void mean_pool_tokens(const float* x, float* y, int B, int T, int C)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * C) return;
    int b = idx / C;
    int c = idx % C;

    float sum = 0.0f;
    for (int t = 0; t < T; t++) {
        sum += x[(b * T + t) * C + c];
    }
    y[idx] = sum / T;
}
