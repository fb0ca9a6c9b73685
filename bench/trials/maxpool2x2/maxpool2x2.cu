#include <cuda_runtime.h>
#include <float.h>

__global__ void maxpool2x2(const float* x, float* y, int* idx_out, int N, int C, int H, int W) {
    int Ho = H / 2;
    int Wo = W / 2;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int total = N * C * Ho * Wo;
    if (i >= total) return;
    int ow = i % Wo;
    int oh = (i / Wo) % Ho;
    int nc = i / (Wo * Ho);
    const float* plane = x + (size_t)nc * H * W;
    float best = -FLT_MAX;
    int besti = 0;
    int dh = 0;
    while (dh < 2) {
        for (int dw = 0; dw < 2; dw++) {
            int ih = oh * 2 + dh;
            int iw = ow * 2 + dw;
            float v = plane[ih * W + iw];
            if (v > best) {
                best = v;
                besti = ih * W + iw;
            }
        }
        dh++;
    }
    y[i] = best;
    idx_out[i] = besti;
}

void launch(const float* x, float* y, int* idx, int N, int C, int H, int W) {
    int total = N * C * (H / 2) * (W / 2);
    maxpool2x2<<<(total + 255) / 256, 256>>>(x, y, idx, N, C, H, W);
}
