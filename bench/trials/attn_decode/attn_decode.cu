// One attention decode step against a KV cache: for each (b, h),
//   out[b, h, :] = softmax(scale * q[b, h, :] . K[b, :, h, :]^T) @ V[b, :, h, :]
// q, out [B, H, D]; k, v [B, T, H, D] (the cache in token-major layout), f32, D = 128.
// One thread per (b, h): a max pass over the T keys, then an exp-sum pass accumulating V into out, then a divide.
#include <math.h>
#define HEAD_DIM 128

__global__ void attn_decode(const float* q, const float* k, const float* v, float* out,
                            int B, int H, int T, float scale)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * H) return;
    int b = idx / H;
    int h = idx % H;
    const float* qp = q + (size_t)idx * HEAD_DIM;
    float* op = out + (size_t)idx * HEAD_DIM;

    float m = -INFINITY;
    for (int t = 0; t < T; t++) {
        const float* kp = k + (((size_t)b * T + t) * H + h) * HEAD_DIM;
        float s = 0.0f;
        for (int d = 0; d < HEAD_DIM; d++) s += qp[d] * kp[d];
        s *= scale;
        if (s > m) m = s;
    }

    for (int d = 0; d < HEAD_DIM; d++) op[d] = 0.0f;
    float denom = 0.0f;
    for (int t = 0; t < T; t++) {
        const float* kp = k + (((size_t)b * T + t) * H + h) * HEAD_DIM;
        const float* vp = v + (((size_t)b * T + t) * H + h) * HEAD_DIM;
        float s = 0.0f;
        for (int d = 0; d < HEAD_DIM; d++) s += qp[d] * kp[d];
        float p = expf(s * scale - m);
        denom += p;
        for (int d = 0; d < HEAD_DIM; d++) op[d] += p * vp[d];
    }
    for (int d = 0; d < HEAD_DIM; d++) op[d] /= denom;
}

void launch_attn_decode(const float* d_q, const float* d_k, const float* d_v, float* d_out, int B, int H, int T)
{
    int n = B * H;
    attn_decode<<<(n + 127) / 128, 128>>>(d_q, d_k, d_v, d_out, B, H, T, 1.0f / sqrtf((float)HEAD_DIM));
}
