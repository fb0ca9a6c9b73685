// Rotary position embedding, in place on x [B, T, H, D], D even.
// Pair (2i, 2i+1) of each head vector is rotated by cos/sin [T, D/2].
// One thread per (b, t, h, i).
__global__ void rope_pairs(float* x, const float* cos_t, const float* sin_t, int B, int T, int H, int D)
{
    int half = D / 2;
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int total = B * T * H * half;
    if (idx >= total) return;
    int i = idx % half;
    int h = (idx / half) % H;
    int t = (idx / (half * H)) % T;
    int b = idx / (half * H * T);
    int base = ((b * T + t) * H + h) * D;
    float x0 = x[base + 2 * i];
    float x1 = x[base + 2 * i + 1];
    float c = cos_t[t * half + i];
    float s = sin_t[t * half + i];
    x[base + 2 * i]     = x0 * c - x1 * s;
    x[base + 2 * i + 1] = x0 * s + x1 * c;
}

void launch_rope_pairs(float* x, const float* cos_t, const float* sin_t, int B, int T, int H, int D)
{
    int total = B * T * H * (D / 2);
    int threads = 256;
    int blocks = (total + threads - 1) / threads;
    rope_pairs<<<blocks, threads>>>(x, cos_t, sin_t, B, T, H, D);
}
