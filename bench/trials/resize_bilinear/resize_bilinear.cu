// Bilinear resize of an NCHW f32 tensor, x [N, C, H, W] -> y [N, C, OH, OW], align_corners = false (what PyTorch's
// F.interpolate(x, size=(OH, OW), mode="bilinear") computes): source coordinate (o + 0.5) * in / out - 0.5, clamped
// at 0, the upper neighbour clamped to the last row/column. One thread per flat output index.
extern "C" __global__ void resize_bilinear(const float* x, float* y, int N, int C, int H, int W, int OH, int OW)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= N * C * OH * OW) return;
    int ox = idx % OW;
    int oy = (idx / OW) % OH;
    int nc = idx / (OW * OH);

    float scale_y = (float)H / OH;
    float scale_x = (float)W / OW;
    float sy = (oy + 0.5f) * scale_y - 0.5f;
    float sx = (ox + 0.5f) * scale_x - 0.5f;
    if (sy < 0.0f) sy = 0.0f;
    if (sx < 0.0f) sx = 0.0f;
    int y0 = (int)sy;
    int x0 = (int)sx;
    int y1 = y0 + 1 < H ? y0 + 1 : H - 1;
    int x1 = x0 + 1 < W ? x0 + 1 : W - 1;
    float ly = sy - y0;
    float lx = sx - x0;

    const float* p = x + nc * H * W;
    float top = (1.0f - lx) * p[y0 * W + x0] + lx * p[y0 * W + x1];
    float bot = (1.0f - lx) * p[y1 * W + x0] + lx * p[y1 * W + x1];
    y[idx] = (1.0f - ly) * top + ly * bot;
}
