// Depthwise-separable conv2d fused in one kernel: a depthwise KS x KS conv (pad PAD, stride 1) per input channel,
// then a pointwise 1x1 conv C -> OC. x [N, C, H, W], dw [C, KS, KS], pw [OC, C], y [N, OC, H, W].
// One thread per output (n, oc, h, w), flat index; the depthwise value is recomputed for every oc.
#define KS 3
#define PAD 1

__global__ void dwsep_conv2d(const float* x, const float* dw, const float* pw, float* y,
                             int N, int C, int OC, int H, int W)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < N * OC * H * W) {
        int ow = idx % W;
        int oh = (idx / W) % H;
        int oc = (idx / (H * W)) % OC;
        int n = idx / (OC * H * W);
        float out = 0.0f;
        for (int c = 0; c < C; c++) {
            const float* plane = x + (n * C + c) * H * W;
            const float* k = dw + c * KS * KS;
            float d = 0.0f;
            for (int kh = 0; kh < KS; kh++) {
                for (int kw = 0; kw < KS; kw++) {
                    int ih = oh - PAD + kh;
                    int iw = ow - PAD + kw;
                    if (ih >= 0 && ih < H && iw >= 0 && iw < W) {
                        d += plane[ih * W + iw] * k[kh * KS + kw];
                    }
                }
            }
            out += pw[oc * C + c] * d;
        }
        y[idx] = out;
    }
}

void launch_dwsep(const float* x, const float* dw, const float* pw, float* y, int N, int C, int OC, int H, int W)
{
    int total = N * OC * H * W;
    dwsep_conv2d<<<(total + 255) / 256, 256>>>(x, dw, pw, y, N, C, OC, H, W);
}
