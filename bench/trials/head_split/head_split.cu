// Attention head split: x [B, T, H, D] -> y [B, H, D, T] (f32), i.e. y[b, h, d, t] = x[b, t, h, d].
// One thread per flat output index, taken apart with / and %.
__global__ void head_split(const float* x, float* y, int B, int T, int H, int D)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int total = B * H * D * T;
    if (idx >= total) return;
    int t = idx % T;
    int d = (idx / T) % D;
    int h = (idx / (T * D)) % H;
    int b = idx / (T * D * H);
    y[idx] = x[((b * T + t) * H + h) * D + d];
}
